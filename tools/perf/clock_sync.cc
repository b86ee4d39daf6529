#include "tools/perf/clock_sync.h"

namespace detwan::perf {
namespace {

__extension__ typedef __int128 i128;  // -Wpedantic rejects the plain spelling

}  // namespace

ClockSync::ClockSync() = default;

bool ClockSync::add(int64_t t1_ns, int64_t t2_ns, int64_t t3_ns, int64_t t4_ns) noexcept {
  // 128-bit intermediates: the timestamps come from the network and may be anything.
  const i128 rtt = (static_cast<i128>(t4_ns) - t1_ns) - (static_cast<i128>(t3_ns) - t2_ns);
  if (rtt < 0 || rtt > INT64_MAX) return false;
  const i128 offset = ((static_cast<i128>(t2_ns) - t1_ns) + (static_cast<i128>(t3_ns) - t4_ns)) / 2;
  if (offset > INT64_MAX || offset < INT64_MIN) return false;

  const auto rtt_ns = static_cast<int64_t>(rtt);
  rtt_.record(rtt_ns);
  // <=: on equal round trips the latest sample wins (the freshest view of the offset).
  if (samples_ == 0 || rtt_ns <= best_rtt_ns_) {
    best_rtt_ns_ = rtt_ns;
    best_offset_ns_ = static_cast<int64_t>(offset);
  }
  ++samples_;
  return true;
}

int64_t ClockSync::correction_ns(ClockMode mode) const noexcept {
  if (samples_ == 0) return 0;
  switch (mode) {
    case ClockMode::kSync:
      return 0;
    case ClockMode::kEstimate:
      return best_offset_ns_;
    case ClockMode::kAuto: {
      // Correct only when the offset is measurably non-zero: |offset| beyond its error bound.
      const i128 magnitude = best_offset_ns_ < 0 ? -static_cast<i128>(best_offset_ns_)
                                                 : static_cast<i128>(best_offset_ns_);
      return magnitude > error_ns() ? best_offset_ns_ : 0;
    }
  }
  return 0;
}

}  // namespace detwan::perf
