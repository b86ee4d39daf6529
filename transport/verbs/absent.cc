// Built instead of the verbs backend when libibverbs is not found at configure time.
#include "transport/verbs/endpoint.h"

namespace detwan::transport::verbs {

BackendInfo backend_info() {
  return {"verbs", false, false, "not compiled: libibverbs was not found when detwan was configured"};
}

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions&) {
  return common::make_error(ErrorCode::kUnavailable,
                            "transport backend 'verbs' is not compiled in (libibverbs not found)");
}

}  // namespace detwan::transport::verbs
