// PLACEHOLDER (session 4 scaffolding): replaced by the real loopback backend.
#include "transport/loopback/endpoint.h"

namespace detwan::transport::loopback {

BackendInfo backend_info() { return {"loopback", false, false, "placeholder"}; }
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(ErrorCode::kUnavailable, "loopback: placeholder");
}

}  // namespace detwan::transport::loopback
