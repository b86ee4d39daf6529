// PLACEHOLDER (session 4 scaffolding): replaced by the real tcp backend.
#include "transport/tcp/endpoint.h"

namespace detwan::transport::tcp {

BackendInfo backend_info() { return {"tcp", false, false, "placeholder"}; }
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(ErrorCode::kUnavailable, "tcp: placeholder");
}

}  // namespace detwan::transport::tcp
