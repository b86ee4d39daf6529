// Setup side of on-time playout: validation, allocation, restart for reuse, counters as JSON.
#include "dataplane/sched/playout.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>
#include <memory>
#include <string>

#include <fmt/format.h>

namespace detwan::dataplane::sched {

std::string_view to_string(PlayoutDrop reason) noexcept {
  switch (reason) {
    case PlayoutDrop::kLate:
      return "late";
    case PlayoutDrop::kTooEarly:
      return "too_early";
    case PlayoutDrop::kBufferFull:
      return "buffer_full";
    case PlayoutDrop::kStale:
      return "stale";
    case PlayoutDrop::kCount:
      break;
  }
  return "unknown";
}

Playout::Playout(const PlayoutConfig& config)
    : config_(config),
      ring_(std::make_unique<Entry[]>(config.capacity_frames)),
      heap_(std::make_unique<Entry[]>(config.capacity_frames)) {}

common::Result<Playout> Playout::create(const PlayoutConfig& config) {
  if (auto valid = validate(config); !valid) return std::unexpected(valid.error());
  return Playout(config);
}

bool Playout::restart(const PlayoutConfig& config) noexcept {
  // validate()'s rules, without building its message.
  if (size_ != 0 || config.capacity_frames != config_.capacity_frames || config.bound_ns < 0 ||
      config.max_hold_ns < config.bound_ns) {
    return false;
  }
  config_ = config;
  PlayoutCounters& c = counters_;
  c.received_packets = c.received_bytes = c.released_packets = c.released_bytes = 0;
  c.late_packets = c.late_delivered = 0;
  std::fill(std::begin(c.dropped), std::end(c.dropped), 0);
  for (common::LogLinearHistogram* h :
       {&c.wan_delay_ns, &c.one_way_delay_ns, &c.lateness_ns, &c.playout_error_ns}) {
    h->reset();
  }
  next_sequence_ = 0;
  ring_head_ = 0;
  last_now_ns_ = std::numeric_limits<int64_t>::min();
  return true;
}

common::Result<void> Playout::validate(const PlayoutConfig& config) {
  using common::ErrorCode;
  if (config.bound_ns < 0) {
    return common::make_error(
        ErrorCode::kConfig,
        fmt::format("playout: bound_ns must be >= 0 (got {})", config.bound_ns));
  }
  if (config.max_hold_ns < config.bound_ns) {
    return common::make_error(ErrorCode::kConfig,
                              fmt::format("playout: max_hold_ns {} is below bound_ns {}",
                                          config.max_hold_ns, config.bound_ns));
  }
  if (config.capacity_frames == 0) {
    return common::make_error(ErrorCode::kConfig, "playout: capacity_frames must be > 0");
  }
  return {};
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(PlayoutCounters, dropped) ==
              sizeof(uint64_t) * std::size(kPlayoutCounterFields));
#pragma GCC diagnostic pop

std::string Playout::counters_json() const {
  const PlayoutCounters& c = counters_;
  std::string out = "{";
  common::for_each_counter(c, kPlayoutCounterFields, [&](std::string_view key, uint64_t value) {
    fmt::format_to(std::back_inserter(out), "\"{}\":{},", key, value);
  });
  out += "\"dropped\":{";
  for (int i = 0; i < kPlayoutDropCount; ++i) {
    fmt::format_to(std::back_inserter(out), "{}\"{}\":{}", i == 0 ? "" : ",",
                   to_string(static_cast<PlayoutDrop>(i)), c.dropped[i]);
  }
  fmt::format_to(std::back_inserter(out),
                 "}},\"wan_delay_ns\":{},\"one_way_delay_ns\":{},\"lateness_ns\":{},"
                 "\"playout_error_ns\":{},\"held_frames\":{}}}",
                 c.wan_delay_ns.summary_json(), c.one_way_delay_ns.summary_json(),
                 c.lateness_ns.summary_json(), c.playout_error_ns.summary_json(), size_);
  return out;
}

}  // namespace detwan::dataplane::sched
