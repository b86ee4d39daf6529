// Compiled instead of port.cc/port_datapath.cc when meson finds no DPDK (-Ddpdk=disabled).
#include "tools/wanem/backend.h"

namespace detwan::wanem::dpdk {

bool available() { return false; }

common::Result<RunOutcome> run(const BackendRun&) {
  return common::make_error(common::ErrorCode::kConfig,
                            "backend 'dpdk': this build has no DPDK (configure with -Ddpdk=enabled "
                            "and libdpdk-dev installed)");
}

}  // namespace detwan::wanem::dpdk
