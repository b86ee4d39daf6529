#include "transport/registry.h"

#include <array>

#include <fmt/format.h>

#include "transport/loopback/endpoint.h"
#include "transport/shm/endpoint.h"
#include "transport/tcp/endpoint.h"
#include "transport/udp/endpoint.h"
#include "transport/verbs/endpoint.h"

namespace detwan::transport {
namespace {

struct BackendEntry {
  std::string_view name;
  BackendInfo (*info)();
  Result<std::unique_ptr<Endpoint>> (*make)(const EndpointOptions&);
  bool inline_progress = false;  // EndpointOptions::inline_progress supported
};

constexpr std::array kBackends{
    BackendEntry{"udp", udp::backend_info, udp::make_endpoint, true},
    BackendEntry{"loopback", loopback::backend_info, loopback::make_endpoint, true},
    BackendEntry{"tcp", tcp::backend_info, tcp::make_endpoint},
    BackendEntry{"shm", shm::backend_info, shm::make_endpoint},
    BackendEntry{"verbs", verbs::backend_info, verbs::make_endpoint},
};

const BackendEntry* find(std::string_view name) {
  for (const auto& entry : kBackends) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::string known_names() {
  std::string names;
  for (const auto& entry : kBackends) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

}  // namespace

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out;
  for (const auto& entry : kBackends) out.push_back(entry.info());
  return out;
}

BackendInfo backend_info(std::string_view name) {
  const BackendEntry* entry = find(name);
  if (entry == nullptr) return {std::string(name), false, false, "unknown backend"};
  return entry->info();
}

Result<std::unique_ptr<Endpoint>> make_endpoint(std::string_view backend,
                                                const EndpointOptions& options) {
  const BackendEntry* entry = find(backend);
  if (entry == nullptr) {
    return common::make_error(ErrorCode::kNotFound,
                              fmt::format("unknown transport backend '{}' (known: {})", backend,
                                          known_names()));
  }
  BackendInfo info = entry->info();
  if (!info.usable) {
    return common::make_error(ErrorCode::kUnavailable,
                              fmt::format("transport backend '{}' is unavailable: {}", backend,
                                          info.reason));
  }
  if (options.inline_progress && !entry->inline_progress) {
    return common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("transport backend '{}' has no inline progress (EndpointOptions::"
                    "inline_progress: udp and loopback only)",
                    backend));
  }
  return entry->make(options);
}

}  // namespace detwan::transport
