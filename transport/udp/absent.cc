// Built instead of the udp backend when liburing is not found at configure time.
#include "transport/udp/endpoint.h"

namespace detwan::transport::udp {

BackendInfo backend_info() {
  return {"udp", false, false, "not compiled: liburing was not found when detwan was configured"};
}

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(ErrorCode::kUnavailable,
                            "transport backend 'udp' is not compiled in (liburing not found)");
}

}  // namespace detwan::transport::udp
