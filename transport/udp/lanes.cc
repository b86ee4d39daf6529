#include "transport/udp/lanes.h"

#include <utility>

#include <fmt/format.h>

#include "transport/udp/lane_steering.h"

namespace detwan::transport::udp {

Result<std::unique_ptr<LanedEndpoint>> LanedEndpoint::create(uint32_t lanes,
                                                             LinkOptions link_options,
                                                             const LinkFactory& make_link,
                                                             const EndpointOptions& options) {
  if (lanes < 2 || lanes > kMaxLanes) {
    return common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("udp: {} progress threads: a laned endpoint has 2..{}", lanes, kMaxLanes));
  }
  link_options.listen_lanes = lanes;
  std::unique_ptr<LanedEndpoint> endpoint(new LanedEndpoint());
  endpoint->budget_ = std::make_shared<proto::MemoryBudget>(
      static_cast<uint64_t>(std::max<int64_t>(options.max_reassembly_bytes, 0)));
  EndpointOptions lane_options = options;
  lane_options.inline_progress = false;
  for (uint32_t i = 0; i < lanes; ++i) {
    auto link = make_link(link_options);
    if (!link) return std::unexpected(link.error());
    // Each lane derives its own keyring from the key (it holds its thread's OpenSSL contexts).
    endpoint->lanes_.push_back(std::make_unique<Lane>(std::move(*link), "udp", lane_options,
                                                      endpoint->accepted_, endpoint->budget_));
  }
  return endpoint;
}

LanedEndpoint::~LanedEndpoint() {
  // Channels still waiting for accept() are released while every lane still runs.
  accepted_->stop();
  lanes_.clear();
}

Result<std::string> LanedEndpoint::listen(const std::string& address) {
  // Lane 0 resolves the address (port 0 picks one); the others join that exact address.
  auto name = lanes_[0]->listen(address);
  if (!name) return name;
  for (size_t i = 1; i < lanes_.size(); ++i) {
    auto joined = lanes_[i]->listen(*name);
    if (!joined) {
      return common::make_error(joined.error().code,
                                fmt::format("udp: progress thread {} of {} could not join {}: {}",
                                            i + 1, lanes_.size(), *name, joined.error().message));
    }
  }
  listening_.store(true, std::memory_order_release);
  return name;
}

Result<std::unique_ptr<Channel>> LanedEndpoint::accept(int64_t timeout_ns) {
  if (!listening_.load(std::memory_order_acquire)) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              "udp: accept() before a successful listen()");
  }
  return accepted_->pop(timeout_ns);
}

Result<std::unique_ptr<Channel>> LanedEndpoint::connect(const std::string& address,
                                                        const ChannelOptions& options,
                                                        int64_t timeout_ns) {
  const uint64_t lane = next_lane_.fetch_add(1, std::memory_order_relaxed) % lanes_.size();
  return lanes_[lane]->connect(address, options, timeout_ns);
}

datagram::DriverCounters LanedEndpoint::counters() const {
  datagram::DriverCounters sum;
  for (const auto& lane : lanes_) sum += lane->counters();
  return sum;
}

}  // namespace detwan::transport::udp
