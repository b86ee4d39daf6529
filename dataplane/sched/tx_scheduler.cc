// Setup side of the transmit scheduler: policy validation, sizing, counters as JSON. Run-time
// changes are tx_scheduler_reconfigure.cc's.
#include "dataplane/sched/tx_scheduler.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <iterator>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/units.h"

namespace detwan::dataplane::sched {
namespace {

using common::ErrorCode;
using common::make_error;

constexpr uint32_t kMaxWheelBuckets = 1u << 24;
// Default policer depth: one cycle at the reserved rate, and at least this many max-size
// frames, so that a slow tunnel with bursty arrivals does not lose tokens in every idle gap.
constexpr uint64_t kDefaultBurstFrames = 8;

std::unexpected<common::Error> policy_error(std::string message) {
  return make_error(ErrorCode::kConfig, "tx scheduler: " + std::move(message));
}

// The scalars are the struct's first members and the table names every one of them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(TxCounters, dropped) == sizeof(uint64_t) * std::size(kTxCounterFields));
#pragma GCC diagnostic pop

std::string counters_json_of(const TxCounters& c) {
  std::string out = "{";
  common::for_each_counter(c, kTxCounterFields, [&](std::string_view key, uint64_t value) {
    fmt::format_to(std::back_inserter(out), "\"{}\":{},", key, value);
  });
  out += "\"dropped\":{";
  for (int i = 0; i < kTxDropCount; ++i) {
    fmt::format_to(std::back_inserter(out), "{}\"{}\":{}", i == 0 ? "" : ",",
                   to_string(static_cast<TxDrop>(i)), c.dropped[i]);
  }
  fmt::format_to(std::back_inserter(out), "}},\"departure_error_ns\":{},\"queue_wait_ns\":{}}}",
                 c.departure_error_ns.summary_json(), c.queue_wait_ns.summary_json());
  return out;
}

std::string wait_text(int64_t max_wait_ns) {
  return max_wait_ns == kNoMaxWait ? std::string("unlimited")
                                   : common::format_duration_ns(max_wait_ns);
}

}  // namespace

std::string_view to_string(TxDrop reason) noexcept {
  switch (reason) {
    case TxDrop::kUnknownTunnel:
      return "unknown_tunnel";
    case TxDrop::kOversize:
      return "oversize";
    case TxDrop::kPoliced:
      return "policed";
    case TxDrop::kQueueFull:
      return "queue_full";
    case TxDrop::kMaxWait:
      return "max_wait";
    case TxDrop::kNoSlot:
      return "no_slot";
    case TxDrop::kNoCapacity:
      return "no_capacity";
    case TxDrop::kBeyondHorizon:
      return "beyond_horizon";
    case TxDrop::kMissedSlot:
      return "missed_slot";
    case TxDrop::kReconfigured:
      return "reconfigured";
    case TxDrop::kTunnelRemoved:
      return "tunnel_removed";
    case TxDrop::kCount:
      break;
  }
  return "unknown";
}

TxScheduler::OwnerRules::OwnerRules(const TunnelTxPolicy& policy, uint64_t reserved_rate_bps,
                                    uint64_t burst_bytes, uint64_t shaper_burst_bytes,
                                    int64_t start_ns)
    : configured_policy(policy),
      policer(reserved_rate_bps, burst_bytes, policy.over_rate, start_ns),
      shaper(policy.shaper_rate_bps, shaper_burst_bytes, start_ns),
      shaped(policy.shaper_rate_bps > 0),
      queue_frames(policy.queue_frames),
      max_wait_ns(policy.max_wait_ns),
      missed_slot(policy.missed_slot),
      next_free(LinkTime::at(start_ns)) {}

TxScheduler::TxScheduler(GateControlList gcl, Wheel wheel, Wheel spare)
    : gcl_(std::move(gcl)), wheel_(std::move(wheel)), spare_(std::move(spare)) {}

common::Result<TxScheduler> TxScheduler::create(GateControlList gcl,
                                                const TxSchedulerConfig& config, int64_t start_ns) {
  auto plan = TxScheduler::plan(gcl, config, start_ns, start_ns);
  if (!plan) return std::unexpected(plan.error());
  const auto wheel = [&] {
    return Wheel(plan->wheel_granularity_ns, plan->wheel_buckets, plan->capacity_frames, start_ns);
  };
  TxScheduler scheduler(std::move(gcl), wheel(), wheel());
  scheduler.owners_.reserve(plan->owners.size());
  for (OwnerRules& rules : plan->owners) {
    scheduler.owners_.emplace_back(std::move(rules), TxCounters());
  }
  scheduler.last_now_ns_ = start_ns;
  return scheduler;
}

common::Result<void> TxScheduler::check(const GateControlList& gcl, const TxSchedulerConfig& config,
                                        int64_t start_ns) {
  auto plan = TxScheduler::plan(gcl, config, start_ns, start_ns);
  if (!plan) return std::unexpected(plan.error());
  return {};
}

common::Result<TxScheduler::Plan> TxScheduler::plan(const GateControlList& gcl,
                                                    const TxSchedulerConfig& config,
                                                    int64_t start_ns, int64_t min_horizon_end_ns) {
  const GclConfig& list = gcl.config();
  const uint32_t max_frame = list.max_frame_bytes;
  std::vector<TunnelTxPolicy> policies(gcl.tunnel_count());
  std::vector<bool> named(gcl.tunnel_count(), false);
  for (OwnerIndex owner = 0; owner < gcl.tunnel_count(); ++owner) {
    policies[owner].tunnel_id = gcl.tunnel_id_of(owner);
  }
  for (const TunnelTxPolicy& policy : config.tunnels) {
    const OwnerIndex owner = gcl.find_owner(policy.tunnel_id);
    if (owner == kNoOwner) {
      return policy_error(fmt::format(
          "tunnel {}: has a policy but no slots in the gate control list", policy.tunnel_id));
    }
    if (named[owner]) {
      return policy_error(fmt::format("tunnel {}: policy given twice", policy.tunnel_id));
    }
    named[owner] = true;
    policies[owner] = policy;
  }
  int64_t longest_wait_ns = 0;
  for (const TunnelTxPolicy& policy : policies) {
    const uint32_t id = policy.tunnel_id;
    if (policy.burst_bytes != 0 && policy.burst_bytes < max_frame) {
      return policy_error(
          fmt::format("tunnel {}: policer burst_bytes {} is smaller than max_frame_bytes {} (every "
                      "max-size frame would be policed)",
                      id, policy.burst_bytes, max_frame));
    }
    if (policy.shaper_burst_bytes != 0 && policy.shaper_burst_bytes < max_frame) {
      return policy_error(
          fmt::format("tunnel {}: shaper_burst_bytes {} is smaller than max_frame_bytes {}", id,
                      policy.shaper_burst_bytes, max_frame));
    }
    if (policy.queue_frames == 0) {
      return policy_error(fmt::format("tunnel {}: queue_frames must be > 0", id));
    }
    if (policy.max_wait_ns < 0) {
      return policy_error(fmt::format("tunnel {}: max_wait_ns must be >= 0", id));
    }
    if (policy.over_rate == OverRateAction::kBestEffort &&
        gcl.owned_slot_count(gcl.best_effort_owner()) == 0) {
      return policy_error(fmt::format(
          "tunnel {}: over_rate best_effort, but every slot is reserved (no best-effort slot)",
          id));
    }
    if (policy.max_wait_ns != kNoMaxWait)
      longest_wait_ns = std::max(longest_wait_ns, policy.max_wait_ns);
  }
  if (config.best_effort.queue_frames == 0)
    return policy_error("best effort: queue_frames must be > 0");
  if (config.best_effort.max_wait_ns < 0)
    return policy_error("best effort: max_wait_ns must be >= 0");
  if (config.best_effort.max_wait_ns != kNoMaxWait) {
    longest_wait_ns = std::max(longest_wait_ns, config.best_effort.max_wait_ns);
  }
  if (config.capacity_frames == 0) return policy_error("capacity_frames must be > 0");
  if (config.wheel_granularity_ns < 0) return policy_error("wheel_granularity_ns must be >= 0");
  if (config.wheel_buckets > kMaxWheelBuckets) {
    return policy_error(
        fmt::format("wheel_buckets {} above the limit {}", config.wheel_buckets, kMaxWheelBuckets));
  }

  const int64_t granularity = config.wheel_granularity_ns > 0
                                  ? config.wheel_granularity_ns
                                  : std::max<int64_t>(1, gcl.slot_ns() / 8);
  uint32_t buckets = config.wheel_buckets;
  if (buckets == 0) {
    const int64_t horizon = std::max({4 * list.cycle_ns, longest_wait_ns + 2 * list.cycle_ns,
                                      min_horizon_end_ns - start_ns + 2 * granularity});
    const int64_t needed = horizon / granularity + 1;
    if (needed > kMaxWheelBuckets) {
      return policy_error(fmt::format(
          "the timing wheel would need {} buckets of {} to cover {} (set wheel_granularity_ns "
          "larger or max_wait_ns smaller)",
          needed, common::format_duration_ns(granularity), common::format_duration_ns(horizon)));
    }
    buckets = std::bit_ceil(static_cast<uint32_t>(needed));
  }

  Plan plan;
  plan.wheel_granularity_ns = granularity;
  plan.wheel_buckets = Wheel::rounded_bucket_count(buckets);
  plan.capacity_frames = config.capacity_frames;
  plan.owners.reserve(gcl.tunnel_count() + 1);
  for (OwnerIndex owner = 0; owner < gcl.tunnel_count(); ++owner) {
    const TunnelTxPolicy& policy = policies[owner];
    const uint64_t rate = gcl.reserved_rate_bps(owner);
    uint64_t burst = policy.burst_bytes;
    if (burst == 0) {
      burst = std::max<uint64_t>(
          kDefaultBurstFrames * uint64_t{max_frame},
          static_cast<uint64_t>(static_cast<Uint128>(rate) * static_cast<uint64_t>(list.cycle_ns) /
                                8'000'000'000u));
    }
    const uint64_t shaper_burst =
        policy.shaper_burst_bytes != 0 ? policy.shaper_burst_bytes : max_frame;
    plan.owners.emplace_back(policy, rate, burst, shaper_burst, start_ns);
  }
  TunnelTxPolicy best_effort;
  best_effort.tunnel_id = kNoTunnel;
  best_effort.queue_frames = config.best_effort.queue_frames;
  best_effort.max_wait_ns = config.best_effort.max_wait_ns;
  best_effort.missed_slot = config.best_effort.missed_slot;
  plan.owners.emplace_back(best_effort, 0, 0, max_frame, start_ns);
  return plan;
}

const TxCounters* TxScheduler::tunnel_counters(uint32_t tunnel_id) const noexcept {
  const OwnerIndex owner = gcl_.find_owner(tunnel_id);
  return owner == kNoOwner ? nullptr : &owners_[owner].counters;
}

uint32_t TxScheduler::held_frames(OwnerIndex owner) const noexcept {
  return owner < owners_.size() ? owners_[owner].held : 0;
}

std::string TxScheduler::counters_json() const {
  std::string tunnels;
  for (OwnerIndex owner = 0; owner < gcl_.tunnel_count(); ++owner) {
    tunnels += fmt::format("{}\"{}\":{}", owner == 0 ? "" : ",", gcl_.tunnel_id_of(owner),
                           counters_json_of(owners_[owner].counters));
  }
  return fmt::format("{{\"port\":{},\"best_effort\":{},\"tunnels\":{{{}}},\"held_frames\":{}}}",
                     counters_json_of(port_), counters_json_of(owners_.back().counters), tunnels,
                     wheel_.size());
}

std::string TxScheduler::describe() const {
  std::string out = gcl_.describe();
  for (OwnerIndex owner = 0; owner < gcl_.tunnel_count(); ++owner) {
    const OwnerState& s = owners_[owner];
    out += fmt::format(
        "tunnel {} policy: police {} burst {} bytes, over rate {}, shaper {}, queue {} frames, "
        "max wait {}\n",
        gcl_.tunnel_id_of(owner), common::format_rate_bps(s.policer.bucket().rate_bps()),
        s.policer.bucket().burst_bytes(),
        s.policer.action() == OverRateAction::kDrop ? "drop" : "best_effort",
        s.shaped ? fmt::format("{} burst {} bytes", common::format_rate_bps(s.shaper.rate_bps()),
                               s.shaper.burst_bytes())
                 : std::string("off"),
        s.queue_frames, wait_text(s.max_wait_ns));
  }
  const OwnerState& be = owners_.back();
  out += fmt::format("best effort policy: queue {} frames, max wait {}\n", be.queue_frames,
                     wait_text(be.max_wait_ns));
  out += fmt::format("timing wheel: {} buckets of {}, capacity {} frames\n", wheel_.bucket_count(),
                     common::format_duration_ns(wheel_.granularity_ns()), wheel_.capacity());
  return out;
}

}  // namespace detwan::dataplane::sched
