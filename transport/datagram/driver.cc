// Backend-independent setup helpers of the datagram driver (driver.h, session.h).
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "transport/datagram/session.h"

namespace detwan::transport::datagram {
namespace {

constexpr int64_t kMinRecvWindowBytes = int64_t{4} << 20;
constexpr int32_t kMinMtuBytes = 256;
constexpr int32_t kMaxMtuBytes = 65535;

Result<ChannelOptions> invalid(std::string message) {
  return common::make_error(ErrorCode::kInvalidArgument, "channel options: " + std::move(message));
}

}  // namespace

Result<ChannelOptions> normalize_options(const ChannelOptions& options,
                                         const std::string& connect_address) {
  ChannelOptions out = options;
  if (out.paths.empty()) {
    PathSpec path;
    path.remote = connect_address;
    path.rate_bps = out.rate_bps;
    path.frame_overhead_bytes = out.frame_overhead_bytes;
    path.max_burst_bytes = out.max_burst_bytes;
    out.paths.push_back(path);
  }
  if (out.paths.size() > kMaxPaths) {
    return invalid(fmt::format("paths: {} paths, at most {}", out.paths.size(), kMaxPaths));
  }
  double sum_rate_bps = 0;
  for (size_t i = 0; i < out.paths.size(); ++i) {
    if (out.paths[i].rate_bps < 0) {
      return invalid(fmt::format("paths[{}].rate_bps: {} is negative", i, out.paths[i].rate_bps));
    }
    if (out.paths[i].max_burst_bytes < 0) {
      return invalid(fmt::format("paths[{}].max_burst_bytes: {} is negative", i,
                                 out.paths[i].max_burst_bytes));
    }
    if (out.paths[i].frame_overhead_bytes < 0) {
      return invalid(fmt::format("paths[{}].frame_overhead_bytes: {} is negative", i,
                                 out.paths[i].frame_overhead_bytes));
    }
    sum_rate_bps += static_cast<double>(out.paths[i].rate_bps);
  }
  if (out.mtu_bytes < kMinMtuBytes || out.mtu_bytes > kMaxMtuBytes) {
    return invalid(fmt::format("mtu_bytes: {} not in [{}, {}]", out.mtu_bytes, kMinMtuBytes,
                               kMaxMtuBytes));
  }
  if (out.peer_timeout_ns <= 0) return invalid("peer_timeout_ns must be > 0");
  if (out.keepalive_interval_ns <= 0) return invalid("keepalive_interval_ns must be > 0");
  if (out.initial_rtt_ns <= 0) return invalid("initial_rtt_ns must be > 0");
  if (out.max_message_bytes < 0) return invalid("max_message_bytes must be >= 0");
  if (out.recv_window_bytes < 0) return invalid("recv_window_bytes must be >= 0");
  if (out.recv_window_bytes == 0) {
    // Always >= rate x RTT so a reserved path is never window-limited by the first RTT guess.
    const double bdp_bytes = 2.0 * sum_rate_bps / 8.0 * static_cast<double>(out.initial_rtt_ns) / 1e9;
    out.recv_window_bytes = std::max(kMinRecvWindowBytes, static_cast<int64_t>(bdp_bytes));
  }
  return out;
}

}  // namespace detwan::transport::datagram
