#include "dataplane/daemon/backends.h"
#include "dataplane/uring/gateway.h"

namespace detwan::dataplane::daemon {

common::Result<void> run_backend(gw::RunContext& context) {
  if (context.config.backend == gw::Backend::kUring) return uring::run(context);
  return common::make_error(common::ErrorCode::kConfig,
                            "backend dpdk: this detwan-gw was built without the dataplane/dpdk "
                            "library");
}

}  // namespace detwan::dataplane::daemon
