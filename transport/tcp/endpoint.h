#pragma once
// The tcp transport backend (docs/transport.md "Backends").
#include "transport/registry.h"
#include "transport/transport.h"

namespace detwan::transport::tcp {

[[nodiscard]] BackendInfo backend_info();
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options);

}  // namespace detwan::transport::tcp
