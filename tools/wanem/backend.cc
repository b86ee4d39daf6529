#include "tools/wanem/backend.h"

namespace detwan::wanem {
namespace {

constexpr BackendEntry kBackends[] = {
    {"packet", "AF_PACKET raw sockets; sleeps when idle (default)", &packet::available,
     &packet::run},
    {"dpdk", "DPDK ethdev (net_af_packet, net_af_xdp, net_null, ... vdevs); busy-polls",
     &dpdk::available, &dpdk::run},
};

}  // namespace

std::span<const BackendEntry> backends() noexcept { return kBackends; }

const BackendEntry* find_backend(std::string_view name) noexcept {
  for (const BackendEntry& entry : kBackends) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

}  // namespace detwan::wanem
