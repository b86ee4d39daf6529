// PLACEHOLDER (session 4 scaffolding): replaced by the real udp backend.
#include "transport/udp/endpoint.h"

namespace detwan::transport::udp {

BackendInfo backend_info() { return {"udp", false, false, "placeholder"}; }
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(ErrorCode::kUnavailable, "udp: placeholder");
}

}  // namespace detwan::transport::udp
