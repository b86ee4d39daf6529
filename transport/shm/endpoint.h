#pragma once
// The shm transport backend (docs/transport.md "Backends").
#include <cstdint>

#include "transport/registry.h"
#include "transport/transport.h"

namespace detwan::transport::shm {

// The shm endpoint's own counters (tests and tools: dynamic_cast an Endpoint of backend "shm").
class ShmEndpointBase : public Endpoint {
 public:
  // Connections refused because the peer runs under another uid (SO_PEERCRED).
  [[nodiscard]] virtual uint64_t refused_peers() const = 0;
};

[[nodiscard]] BackendInfo backend_info();
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options);

}  // namespace detwan::transport::shm
