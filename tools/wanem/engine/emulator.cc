// Setup and reporting side of the emulator (construction, run-time changes, counters JSON).
// The per-frame code is in emulator_datapath.cc.
#include <string>
#include <utility>

#include <fmt/format.h>

#include "tools/wanem/engine/emulator_impl.h"

namespace detwan::wanem {

std::string_view to_string(DropReason reason) noexcept {
  switch (reason) {
    case DropReason::kLoss:
      return "loss";
    case DropReason::kBurstLoss:
      return "burst_loss";
    case DropReason::kQueueFull:
      return "queue_full";
    case DropReason::kLinkDown:
      return "link_down";
    case DropReason::kNoCapacity:
      return "no_capacity";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

std::string_view to_string(TrafficClass traffic_class) noexcept {
  switch (traffic_class) {
    case TrafficClass::kReserved:
      return "reserved";
    case TrafficClass::kBestEffort:
      return "best_effort";
    case TrafficClass::kCross:
      return "cross";
  }
  return "unknown";
}

Emulator::Impl::Impl(const ImpairmentSpec& spec, int64_t start_ns, uint32_t max_frames)
    : start_ns_(start_ns),
      max_frames_(max_frames),
      cross_(spec.seed),
      loss_rng_(spec.seed, RngStream::kLoss),
      ge_rng_(spec.seed, RngStream::kBurstLoss),
      dup_rng_(spec.seed, RngStream::kDuplicate),
      jitter_rng_(spec.seed, RngStream::kJitter),
      reorder_rng_(spec.seed, RngStream::kReorder),
      slots_(std::make_unique<Slot[]>(max_frames)),
      free_slots_(std::make_unique<uint32_t[]>(max_frames)),
      free_count_(max_frames),
      reserved_queue_(max_frames),
      // Real frames, one cross run before each and after the last, plus slack for runs of
      // different sizes after a cross-size change.
      best_effort_queue_(2 * max_frames + 16),
      delay_line_(max_frames),
      reorder_line_(max_frames),
      link_free_(LinkTime::at(start_ns)) {
  // Pop order = slot order, which keeps slot reuse (and memory access) predictable.
  for (uint32_t i = 0; i < max_frames; ++i) free_slots_[i] = max_frames - 1 - i;
  spec_.seed = spec.seed;
  configure(spec, start_ns, /*initial=*/true);
}

void Emulator::Impl::configure(const ImpairmentSpec& spec, int64_t now_ns, bool initial) {
  const bool rate_changed = spec.rate_bps != spec_.rate_bps;
  const bool cross_changed = initial || rate_changed || spec.cross_share != spec_.cross_share ||
                             spec.cross_burst_ns != spec_.cross_burst_ns ||
                             spec.cross_frame_bytes != spec_.cross_frame_bytes;
  // Fractions of a ns are kept in units of the old rate; round the link's clock up to a whole
  // ns so they mean the same under the new one.
  if (rate_changed && !initial) link_free_ = LinkTime::at(link_free_.ceil_ns());
  ge_.configure(spec.ge);
  jitter_ = JitterSampler(spec.jitter_ns, spec.jitter_distribution);
  const uint64_t seed = spec_.seed;  // the random streams keep their seed (documented)
  spec_ = spec;
  spec_.seed = seed;
  queue_limit_bytes_ = spec_.rate_bps == 0 ? 0 : spec_.effective_queue_bytes();
  prio_queue_limit_bytes_ = spec_.rate_bps == 0 ? 0 : spec_.prio_queue_bytes;
  if (cross_changed) cross_.reset(spec_, now_ns);
}

Emulator::Emulator(const ImpairmentSpec& spec, int64_t start_ns, uint32_t max_frames) {
  if (auto ok = validate(spec); !ok) throw common::Failure(ok.error());
  if (max_frames == 0) {
    throw common::Failure(
        common::Error{common::ErrorCode::kInvalidArgument, "emulator max_frames must be >= 1"});
  }
  impl_ = std::make_unique<Impl>(spec, start_ns, max_frames);
}

Emulator::~Emulator() = default;

common::Result<void> Emulator::update_spec(const ImpairmentSpec& spec, int64_t now_ns) {
  if (auto ok = validate(spec); !ok) return ok;
  impl_->advance(now_ns);  // what happened before now_ns happened under the old spec
  impl_->configure(spec, now_ns, /*initial=*/false);
  return {};
}

void Emulator::set_link_up(bool up, int64_t now_ns) noexcept {
  Impl& s = *impl_;
  s.advance(now_ns);
  if (!up && !s.forced_down_) {
    s.forced_down_ = true;
    s.manual_down_[s.manual_down_total_ % kManualDownHistory] = DownWindow{now_ns, INT64_MAX};
    ++s.manual_down_total_;
  } else if (up && s.forced_down_) {
    s.forced_down_ = false;
    s.manual_down_[(s.manual_down_total_ - 1) % kManualDownHistory].end_ns = now_ns;
  }
}

const ImpairmentSpec& Emulator::spec() const noexcept { return impl_->spec_; }
const Counters& Emulator::counters() const noexcept { return impl_->counters_; }
uint32_t Emulator::held_frames() const noexcept { return impl_->held_frames(); }
uint64_t Emulator::queued_bytes() const noexcept { return impl_->queued_bytes_; }
bool Emulator::link_forced_down() const noexcept { return impl_->forced_down_; }

std::string Emulator::counters_json() const {
  const Counters& counters = impl_->counters_;
  std::string out = "{";
  for (int i = 0; i < kClassCount; ++i) {
    const ClassCounters& c = counters.by_class[i];
    std::string dropped;
    for (int r = 0; r < static_cast<int>(DropReason::kCount); ++r) {
      dropped += fmt::format("{}\"{}\":{}", r == 0 ? "" : ",",
                             to_string(static_cast<DropReason>(r)), c.dropped[r]);
    }
    out += fmt::format(
        "{}\"{}\":{{\"offered_packets\":{},\"offered_bytes\":{},\"forwarded_packets\":{},"
        "\"forwarded_bytes\":{},\"duplicated_packets\":{},\"reordered_packets\":{},"
        "\"dropped\":{{{}}},\"queue_depth_bytes\":{},\"sojourn_ns\":{}}}",
        i == 0 ? "" : ",", to_string(static_cast<TrafficClass>(i)), c.offered_packets,
        c.offered_bytes, c.forwarded_packets, c.forwarded_bytes, c.duplicated_packets,
        c.reordered_packets, dropped, counters.queue_depth_bytes[i].summary_json(),
        counters.sojourn_ns[i].summary_json());
  }
  out += fmt::format(",\"held_frames\":{},\"queued_bytes\":{},\"link_forced_down\":{}}}",
                     impl_->held_frames(), impl_->queued_bytes_, impl_->forced_down_);
  return out;
}

}  // namespace detwan::wanem
