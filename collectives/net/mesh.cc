#include "collectives/net/mesh.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <future>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "collectives/crypto.h"
#include "common/byte_order.h"
#include "common/clock.h"
#include "common/logging.h"

namespace detwan::collectives {
namespace {

constexpr std::string_view kHelloMagic = "dtwnmsh2";
constexpr size_t kHelloHeadBytes = 8 + 4 + 4;
constexpr size_t kHelloBytes = kHelloHeadBytes + crypto::kMacBytes;
// Accepted channels whose hello has not arrived yet, at most (beyond: the oldest is closed).
constexpr size_t kMaxPendingHellos = 64;
// While hellos are pending, accept() and the wait for a hello take turns of at most this long,
// so a caller that never says hello delays the genuine one by at most a turn.
constexpr int64_t kTurnNs = 50'000'000;

using Channels = std::vector<std::unique_ptr<transport::Channel>>;

int64_t remaining_ns(int64_t deadline_ns) {
  return std::max<int64_t>(1, deadline_ns - common::MonotonicClock().now_ns());
}

Result<crypto::Key> hello_key(const MeshKey& key) {
  return crypto::derive_key(crypto::view(key), "", "detwan mesh hello v1");
}

std::string hello_head(int rank, int peer) {
  std::string head(kHelloMagic);
  head.resize(kHelloHeadBytes);
  common::store_be32(reinterpret_cast<uint8_t*>(head.data()) + 8, static_cast<uint32_t>(rank));
  common::store_be32(reinterpret_cast<uint8_t*>(head.data()) + 12, static_cast<uint32_t>(peer));
  return head;
}

Result<crypto::Mac> hello_mac(const crypto::Key& key, std::string_view head) {
  return crypto::hmac_sha256(crypto::view(key), {crypto::field("detwan mesh hello v1"), head});
}

// The caller's rank if `message` is a hello to `rank` made with the key; else why not.
Result<int> check_hello(const crypto::Key& key, std::span<const std::byte> message, int rank) {
  const std::string_view bytes = crypto::view(message);
  if (bytes.size() != kHelloBytes || !bytes.starts_with(kHelloMagic)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("not a mesh hello ({} bytes)", bytes.size()));
  }
  const std::string_view head = bytes.substr(0, kHelloHeadBytes);
  auto mac = hello_mac(key, head);
  if (!mac) return std::unexpected(mac.error());
  if (!crypto::equal(crypto::view(*mac), bytes.substr(kHelloHeadBytes))) {
    return make_error(ErrorCode::kInvalidArgument,
                      "its MAC does not verify (not a member of this communicator)");
  }
  const auto* raw = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto caller = static_cast<int32_t>(common::load_be32(raw + 8));
  const auto acceptor = static_cast<int32_t>(common::load_be32(raw + 12));
  if (acceptor != rank) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("it was made for rank {} (replayed?)", acceptor));
  }
  return caller;
}

Result<void> connect_all(int rank, const Topology& topology, const MeshEndpoints& endpoints,
                         const std::vector<RankAddresses>& addresses,
                         const ChannelOptionsFor& options_for, const MeshKey& key,
                         int64_t deadline_ns, Channels& channels) {
  for (int peer = rank + 1; peer < topology.size(); ++peer) {
    const bool local = topology.same_site(rank, peer);
    transport::Endpoint* endpoint = local ? endpoints.intra : endpoints.inter;
    const std::string& address = local ? addresses[peer].intra : addresses[peer].inter;
    auto hello = mesh_hello(key, rank, peer);
    if (!hello) return std::unexpected(hello.error());
    auto channel = endpoint->connect(address, options_for(peer), remaining_ns(deadline_ns));
    if (!channel) {
      return make_error(channel.error().code,
                        fmt::format("rank {}: connecting to rank {} at {} ({}): {}", rank, peer,
                                    address, endpoint->backend_name(),
                                    channel.error().message));
    }
    auto sent = (*channel)->send(std::span<const std::byte>(*hello));
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

struct Pending {
  std::unique_ptr<transport::Channel> channel;
  std::future<Result<std::vector<std::byte>>> hello;
};

// Accepts on `endpoint` until every rank of `awaited` has connected with a valid hello.
class Acceptor {
 public:
  Acceptor(int rank, transport::Endpoint* endpoint, const crypto::Key& key, MeshStats* stats)
      : rank_(rank), endpoint_(endpoint), key_(key), stats_(stats) {}

  Result<void> run(std::vector<int> awaited, int64_t deadline_ns, Channels& channels) {
    while (true) {
      check_pending(awaited, channels);
      if (awaited.empty()) return {};
      if (common::MonotonicClock().now_ns() >= deadline_ns) return timed_out(awaited);
      if (!pending_.empty() && pending_.size() >= awaited.size()) {
        // Enough callers to finish: wait for a hello (a turn), then look for more callers.
        (void)pending_.front().hello.wait_for(
            std::chrono::nanoseconds(std::min(remaining_ns(deadline_ns), kTurnNs)));
        check_pending(awaited, channels);
        if (awaited.empty()) return {};
      }
      const int64_t wait_ns = pending_.empty() ? remaining_ns(deadline_ns)
                                               : std::min(remaining_ns(deadline_ns), kTurnNs);
      auto channel = endpoint_->accept(wait_ns);
      if (!channel) {
        const ErrorCode code = channel.error().code;
        if (code == ErrorCode::kTimeout) continue;
        if (code == ErrorCode::kInvalidArgument) {  // our own misuse (accept before listen)
          return make_error(code,
                            fmt::format("rank {}: waiting for lower ranks to connect "
                                        "({}): {}",
                                        rank_, endpoint_->backend_name(), channel.error().message));
        }
        // A connection that failed in the backend's own handshake: not the peer awaited.
        refuse(stats_ ? &stats_->bad_hellos : nullptr, "a connection", channel.error().message);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // setup: no busy loop
        continue;
      }
      auto hello = (*channel)->recv();
      pending_.push_back(Pending{std::move(*channel), std::move(hello)});
      if (pending_.size() > kMaxPendingHellos) {
        refuse(stats_ ? &stats_->bad_hellos : nullptr, pending_.front().channel->describe(),
               "no hello while more callers waited");
        pending_.pop_front();
      }
    }
  }

 private:
  void check_pending(std::vector<int>& awaited, Channels& channels) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->hello.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      auto message = it->hello.get();
      const std::string who = it->channel->describe();
      if (!message) {
        refuse(stats_ ? &stats_->bad_hellos : nullptr, who, message.error().message);
      } else if (auto caller = check_hello(key_, *message, rank_); !caller) {
        refuse(stats_ ? &stats_->bad_hellos : nullptr, who, caller.error().message);
      } else if (std::find(awaited.begin(), awaited.end(), *caller) == awaited.end()) {
        refuse(stats_ ? &stats_->unexpected_rank : nullptr, who,
               fmt::format("rank {} is not awaited here (not lower, another site's endpoint, "
                           "or connected already)",
                           *caller));
      } else {
        channels[*caller] = std::move(it->channel);
        std::erase(awaited, *caller);
      }
      it = pending_.erase(it);
    }
  }

  void refuse(std::atomic<uint64_t>* counter, const std::string& who, const std::string& why) {
    if (counter != nullptr) counter->fetch_add(1);
    ++refused_;
    common::logger("collectives")
        ->warn("rank {}: refused a mesh hello from {}: {}", rank_, who, why);
  }

  std::unexpected<Error> timed_out(const std::vector<int>& awaited) const {
    std::string ranks;
    for (int r : awaited) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return make_error(
        ErrorCode::kTimeout,
        fmt::format("rank {}: waiting for lower ranks to connect ({}): rank{} {} "
                    "never connected{}",
                    rank_, endpoint_->backend_name(), awaited.size() == 1 ? "" : "s", ranks,
                    refused_ == 0 ? std::string()
                                  : fmt::format(" ({} hello{} refused)", refused_,
                                                refused_ == 1 ? "" : "s")));
  }

  int rank_;
  transport::Endpoint* endpoint_;
  const crypto::Key& key_;
  MeshStats* stats_;
  std::deque<Pending> pending_;
  int refused_ = 0;
};

}  // namespace

Result<std::vector<std::byte>> mesh_hello(const MeshKey& key, int rank, int peer) {
  auto derived = hello_key(key);
  if (!derived) return std::unexpected(derived.error());
  const std::string head = hello_head(rank, peer);
  auto mac = hello_mac(*derived, head);
  if (!mac) return std::unexpected(mac.error());
  std::vector<std::byte> hello(kHelloBytes);
  std::memcpy(hello.data(), head.data(), head.size());
  std::memcpy(hello.data() + head.size(), mac->data(), mac->size());
  return hello;
}

Result<Channels> connect_mesh(int rank, const Topology& topology, const MeshEndpoints& endpoints,
                              const std::vector<RankAddresses>& addresses,
                              const ChannelOptionsFor& options_for, const MeshKey& key,
                              int64_t timeout_ns, MeshStats* stats) {
  const int n = topology.size();
  if (rank < 0 || rank >= n || static_cast<int>(addresses.size()) != n || !endpoints.intra ||
      !endpoints.inter) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("connect_mesh: rank {} of {} with {} addresses", rank, n,
                                  addresses.size()));
  }
  auto accept_key = hello_key(key);
  if (!accept_key) return std::unexpected(accept_key.error());
  const int64_t deadline_ns = common::MonotonicClock().now_ns() + timeout_ns;
  Channels channels(n);
  Channels connected(n);
  auto connecting = std::async(std::launch::async, [&] {
    return connect_all(rank, topology, endpoints, addresses, options_for, key, deadline_ns,
                       connected);
  });
  std::vector<int> local_lower;
  std::vector<int> remote_lower;
  for (int peer = 0; peer < rank; ++peer) {
    (topology.same_site(rank, peer) ? local_lower : remote_lower).push_back(peer);
  }
  Result<void> accepted;
  if (endpoints.intra == endpoints.inter) {  // one endpoint serves both (tests, one backend)
    std::vector<int> lower(static_cast<size_t>(rank));
    for (int peer = 0; peer < rank; ++peer) lower[peer] = peer;
    accepted = Acceptor(rank, endpoints.intra, *accept_key, stats)
                   .run(std::move(lower), deadline_ns, channels);
  } else {
    accepted = Acceptor(rank, endpoints.intra, *accept_key, stats)
                   .run(std::move(local_lower), deadline_ns, channels);
    if (accepted) {
      accepted = Acceptor(rank, endpoints.inter, *accept_key, stats)
                     .run(std::move(remote_lower), deadline_ns, channels);
    }
  }
  auto connect_result = connecting.get();
  if (!accepted) return std::unexpected(accepted.error());
  if (!connect_result) return std::unexpected(connect_result.error());
  for (int peer = rank + 1; peer < n; ++peer) channels[peer] = std::move(connected[peer]);
  return channels;
}

}  // namespace detwan::collectives
