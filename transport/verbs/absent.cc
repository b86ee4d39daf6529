// Built instead of the verbs backend when it is not configured: -Dverbs=disabled (the
// ThreadSanitizer build of tools/run-tests), or libibverbs-dev missing at configure time.
#include "transport/verbs/endpoint.h"

namespace detwan::transport::verbs {

BackendInfo backend_info() {
  return {"verbs", false, false,
          "not compiled into this build (configured with -Dverbs=disabled, or without "
          "libibverbs-dev)"};
}

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(
      ErrorCode::kUnavailable,
      "transport backend 'verbs' is not compiled into this build (-Dverbs=disabled, or "
      "no libibverbs-dev when it was configured)");
}

}  // namespace detwan::transport::verbs
