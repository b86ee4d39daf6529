#pragma once
// Backends by name. Each backend lives in its own subfolder (udp/, tcp/, shm/, loopback/,
// verbs/) behind a meson feature option and registers one factory in registry.cc.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "transport/transport.h"

namespace detwan::transport {

struct BackendInfo {
  std::string name;
  bool compiled = false;        // built into this binary
  bool usable = false;          // compiled and its hardware/kernel support is present
  std::string reason;           // why not usable ("no RDMA device: ibv_get_device_list empty")
};

[[nodiscard]] std::vector<BackendInfo> list_backends();
[[nodiscard]] BackendInfo backend_info(std::string_view name);

// Creates an endpoint of the named backend. Errors: kNotFound (unknown name, lists the known
// ones), kUnavailable (compiled out or no device, with the reason), kInvalidArgument (bad
// backend_config).
Result<std::unique_ptr<Endpoint>> make_endpoint(std::string_view backend,
                                                const EndpointOptions& options = {});

}  // namespace detwan::transport
