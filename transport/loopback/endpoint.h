#pragma once
// The loopback transport backend (docs/transport.md "Backends"): the detwan protocol over the
// in-memory Fabric of this process (fabric.h), with fault injection from
// EndpointOptions.backend_config (faults.h). Addresses are names: listen("a") binds "a",
// listen("") picks a unique one and returns it.
#include <string>

#include "transport/registry.h"
#include "transport/transport.h"

namespace detwan::transport::loopback {

[[nodiscard]] BackendInfo backend_info();
Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options);

// Test hooks for peer death: everything to and from the endpoint owning `address` (all its
// sockets, in both directions) is silently dropped from now on, as if its host vanished.
// partition(address, false) heals it. kNotFound for an unknown address.
Result<void> partition(const std::string& address, bool partitioned = true);
inline Result<void> kill_endpoint(const std::string& address) { return partition(address, true); }

}  // namespace detwan::transport::loopback
