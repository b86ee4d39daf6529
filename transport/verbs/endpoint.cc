// PLACEHOLDER (session 4 scaffolding): replaced by the real verbs backend.
#include "transport/verbs/endpoint.h"

namespace detwan::transport::verbs {

BackendInfo backend_info() { return {"verbs", false, false, "placeholder"}; }
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(ErrorCode::kUnavailable, "verbs: placeholder");
}

}  // namespace detwan::transport::verbs
