#include "collectives/net/mesh.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <future>
#include <span>

#include <fmt/format.h>

#include "common/clock.h"

namespace detwan::collectives {
namespace {

constexpr uint64_t kHelloMagic = 0x6474776e6d657368ULL;  // "dtwnmesh"
constexpr size_t kHelloBytes = 12;

using Channels = std::vector<std::unique_ptr<transport::Channel>>;

std::array<std::byte, kHelloBytes> hello_for(int rank) {
  std::array<std::byte, kHelloBytes> hello{};
  const uint64_t magic = kHelloMagic;
  const auto r = static_cast<uint32_t>(rank);
  std::memcpy(hello.data(), &magic, 8);
  std::memcpy(hello.data() + 8, &r, 4);
  return hello;
}

int64_t remaining_ns(int64_t deadline_ns) {
  return std::max<int64_t>(1, deadline_ns - common::MonotonicClock().now_ns());
}

Result<void> connect_all(int rank, const Topology& topology, const MeshEndpoints& endpoints,
                         const std::vector<RankAddresses>& addresses,
                         const ChannelOptionsFor& options_for, int64_t deadline_ns,
                         Channels& channels) {
  const auto hello = hello_for(rank);
  for (int peer = rank + 1; peer < topology.size(); ++peer) {
    const bool local = topology.same_site(rank, peer);
    transport::Endpoint* endpoint = local ? endpoints.intra : endpoints.inter;
    const std::string& address = local ? addresses[peer].intra : addresses[peer].inter;
    auto channel = endpoint->connect(address, options_for(peer), remaining_ns(deadline_ns));
    if (!channel) {
      return make_error(channel.error().code,
                        fmt::format("rank {}: connecting to rank {} at {} ({}): {}", rank, peer,
                                    address, endpoint->backend_name(),
                                    channel.error().message));
    }
    auto sent = (*channel)->send(std::span<const std::byte>(hello));
    if (sent.wait_for(std::chrono::nanoseconds(remaining_ns(deadline_ns))) !=
        std::future_status::ready) {
      return make_error(ErrorCode::kTimeout,
                        fmt::format("rank {}: rank {} at {} did not take the hello", rank, peer,
                                    address));
    }
    if (auto ok = sent.get(); !ok) {
      return make_error(ok.error().code, fmt::format("rank {}: hello to rank {}: {}", rank, peer,
                                                     ok.error().message));
    }
    channels[peer] = std::move(*channel);
  }
  return {};
}

Result<void> accept_from(int rank, const Topology& topology, transport::Endpoint* endpoint,
                         int expected, int64_t deadline_ns, Channels& channels) {
  for (int i = 0; i < expected; ++i) {
    auto channel = endpoint->accept(remaining_ns(deadline_ns));
    if (!channel) {
      return make_error(channel.error().code,
                        fmt::format("rank {}: waiting for lower ranks to connect ({}): {}", rank,
                                    endpoint->backend_name(), channel.error().message));
    }
    auto received = (*channel)->recv();
    if (received.wait_for(std::chrono::nanoseconds(remaining_ns(deadline_ns))) !=
        std::future_status::ready) {
      return make_error(ErrorCode::kTimeout,
                        fmt::format("rank {}: a peer connected but sent no hello", rank));
    }
    auto message = received.get();
    if (!message) return std::unexpected(message.error());
    uint64_t magic = 0;
    uint32_t peer = 0;
    if (message->size() == kHelloBytes) {
      std::memcpy(&magic, message->data(), 8);
      std::memcpy(&peer, message->data() + 8, 4);
    }
    if (magic != kHelloMagic || static_cast<int>(peer) >= rank ||
        static_cast<int>(peer) >= topology.size() || channels[peer]) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("rank {}: bad hello from {} ({} bytes, rank {})", rank,
                                    (*channel)->describe(), message->size(), peer));
    }
    channels[peer] = std::move(*channel);
  }
  return {};
}

}  // namespace

Result<Channels> connect_mesh(int rank, const Topology& topology,
                              const MeshEndpoints& endpoints,
                              const std::vector<RankAddresses>& addresses,
                              const ChannelOptionsFor& options_for, int64_t timeout_ns) {
  const int n = topology.size();
  if (rank < 0 || rank >= n || static_cast<int>(addresses.size()) != n || !endpoints.intra ||
      !endpoints.inter) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("connect_mesh: rank {} of {} with {} addresses", rank, n,
                                  addresses.size()));
  }
  const int64_t deadline_ns = common::MonotonicClock().now_ns() + timeout_ns;
  Channels channels(n);
  Channels connected(n);
  auto connecting = std::async(std::launch::async, [&] {
    return connect_all(rank, topology, endpoints, addresses, options_for, deadline_ns, connected);
  });
  int local_lower = 0;
  for (int peer = 0; peer < rank; ++peer) local_lower += topology.same_site(rank, peer) ? 1 : 0;
  Result<void> accepted;
  if (endpoints.intra == endpoints.inter) {  // one endpoint serves both (tests, one backend)
    accepted = accept_from(rank, topology, endpoints.intra, rank, deadline_ns, channels);
  } else {
    accepted = accept_from(rank, topology, endpoints.intra, local_lower, deadline_ns, channels);
  }
  if (accepted && endpoints.intra != endpoints.inter) {
    accepted = accept_from(rank, topology, endpoints.inter, rank - local_lower, deadline_ns,
                           channels);
  }
  auto connect_result = connecting.get();
  if (!accepted) return std::unexpected(accepted.error());
  if (!connect_result) return std::unexpected(connect_result.error());
  for (int peer = rank + 1; peer < n; ++peer) channels[peer] = std::move(connected[peer]);
  return channels;
}

}  // namespace detwan::collectives
