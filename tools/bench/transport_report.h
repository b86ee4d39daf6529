#pragma once
// Shared pieces of the detwan-bench transport subcommands: clocks, CPU accounting, and the
// JSON form of channel statistics and latency distributions.
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "transport/transport.h"

namespace detwan::bench {

// CLOCK_MONOTONIC: one clock for every network namespace of the machine, so a send time
// written by one process can be compared with a receive time taken by another.
[[nodiscard]] int64_t monotonic_ns();
// User + system CPU of this whole process (every thread, getrusage(RUSAGE_SELF)).
[[nodiscard]] double process_cpu_s();
// CPU of the calling thread only (CLOCK_THREAD_CPUTIME_ID): used to take the benchmark's own
// pattern filling / checking out of the transport's CPU figure.
[[nodiscard]] double thread_cpu_s();

[[nodiscard]] boost::json::object stats_to_json(const transport::ChannelStats& stats);
// Adds `from`'s counters into `into` (--channels: one report for all channels); the RTT, window
// and loss figures stay `into`'s (the first channel's).
void add_counters(transport::ChannelStats& into, const transport::ChannelStats& from);

// {"count","min","mean","p50","p90","p99","max"} of `values_ns` (nearest-rank percentiles);
// all zero when empty.
[[nodiscard]] boost::json::object summarize_ns(std::vector<int64_t> values_ns);

// Waits up to timeout_ns for a channel operation; kTimeout naming `what` if it did not finish.
template <typename T>
common::Result<T> await_result(std::future<common::Result<T>>& future, int64_t timeout_ns,
                               std::string_view what) {
  if (future.wait_for(std::chrono::nanoseconds(timeout_ns)) != std::future_status::ready) {
    return common::make_error(
        common::ErrorCode::kTimeout,
        fmt::format("{}: no result within {:.1f} s", what, static_cast<double>(timeout_ns) * 1e-9));
  }
  return future.get();
}

// One JSON document on stdout (pretty enough for a human, one object for a parser).
void print_json(const boost::json::object& doc);

}  // namespace detwan::bench
