#include "dataplane/daemon/backends.h"

#include "dataplane/dpdk/gateway.h"
#include "dataplane/uring/gateway.h"

namespace detwan::dataplane::daemon {

common::Result<void> run_backend(gw::RunContext& context) {
  switch (context.config.backend) {
    case gw::Backend::kUring:
      return uring::run(context);
    case gw::Backend::kDpdk:
      return dpdk::run(context);
  }
  return common::make_error(common::ErrorCode::kConfig, "unknown backend");
}

}  // namespace detwan::dataplane::daemon
