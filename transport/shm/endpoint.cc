// PLACEHOLDER (session 4 scaffolding): replaced by the real shm backend.
#include "transport/shm/endpoint.h"

namespace detwan::transport::shm {

BackendInfo backend_info() { return {"shm", false, false, "placeholder"}; }
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(ErrorCode::kUnavailable, "shm: placeholder");
}

}  // namespace detwan::transport::shm
