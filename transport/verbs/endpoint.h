#pragma once
// The verbs transport backend (docs/transport.md "Backends").
#include "transport/registry.h"
#include "transport/transport.h"

namespace detwan::transport::verbs {

[[nodiscard]] BackendInfo backend_info();
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options);

}  // namespace detwan::transport::verbs
