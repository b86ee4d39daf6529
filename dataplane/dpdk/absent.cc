// Compiled instead of the backend when meson finds no DPDK (-Ddpdk=disabled or no libdpdk-dev).
#include "dataplane/dpdk/gateway.h"

namespace detwan::dataplane::dpdk {

common::Result<void> run(gw::RunContext&) {
  return common::make_error(common::ErrorCode::kUnavailable,
                            "detwan-gw was built without DPDK (libdpdk-dev not found)");
}

}  // namespace detwan::dataplane::dpdk
