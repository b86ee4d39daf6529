#pragma once
// Impairment specification of one direction of an emulated WAN link, and its text form.
//
// SPEC is a comma-separated list of key=value tokens (the testbed's --wan / --wan-path use it):
//   delay=10ms            constant one-way propagation delay
//   jitter=1ms            delay variation; uniform: delay + U[-jitter, +jitter] (netem semantics),
//                         normal: sigma = jitter (clamped at 4 sigma), pareto-normal: netem's
//                         paretonormal table shape, rescaled so that sigma = jitter (see jitter.h).
//                         Jitter never reorders: a packet never leaves before its predecessor.
//   jitter-dist=uniform|normal|pareto-normal
//   loss=0.1%             Bernoulli loss
//   ge=P/R[/1-H[/1-K]]    Gilbert-Elliott burst loss (netem gemodel): P good->bad, R bad->good,
//                         1-H loss in bad (default 100%), 1-K loss in good (default 0%);
//                         ge=none turns it off
//   dup=0.1%              duplication
//   reorder=1%            this share of packets leaves reorder-ahead earlier than its turn
//   reorder-ahead=1ms     how much earlier (default 1ms)
//   rate=1gbit            link rate, counting whole Ethernet frames (L2 header + payload, no
//                         preamble/FCS/IFG), as the kernel's tbf/htb do; rate=0: unlimited
//   queue=1mb             drop-tail queue in bytes, shared by both classes (default: 50 ms at
//                         the rate, at least 64 KiB)
//   cross=50%             synthetic best-effort cross traffic: on/off bursts at line rate
//                         filling this share of the link (needs rate)
//   cross-burst=10ms      mean on-period of the cross-traffic source (exponential)
//   cross-size=1500b      frame size of cross-traffic packets
//   prio-dscp=46/34       DSCP values classified as reserved (strict priority over best effort);
//                         names ef, af11..af43, cs0..cs7 are accepted too
//   prio-port=5000-5999/7000   UDP destination ports classified as reserved
//   prio-queue=256kb      the reserved class's own byte limit: reserved frames are admitted
//                         against it alone and `queue` then limits best effort + cross only
//                         (default 0: both classes share `queue`)
//   down=5s-7s/20s-21s    scripted link-down windows, relative to emulator start, increasing and
//                         disjoint; prio-dscp, prio-port and down take `none` to clear the list
//   seed=42               random seed (default 1): runs with the same seed and input are identical
// Durations are at most 1 day. Later tokens override earlier ones. Empty text = no impairment.
// Invalid input yields an error that names the bad token and why.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace detwan::wanem {

enum class JitterDistribution : uint8_t { kUniform, kNormal, kParetoNormal };

struct GilbertElliott {
  double p_good_to_bad = 0.0;
  double r_bad_to_good = 1.0;
  double loss_in_bad = 1.0;   // 1 - h
  double loss_in_good = 0.0;  // 1 - k
  bool enabled = false;

  bool operator==(const GilbertElliott&) const = default;
};

struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;

  bool operator==(const PortRange&) const = default;
};

struct DownWindow {
  int64_t start_ns = 0;  // relative to emulator start
  int64_t end_ns = 0;    // exclusive

  bool operator==(const DownWindow&) const = default;
};

struct ImpairmentSpec {
  int64_t delay_ns = 0;
  int64_t jitter_ns = 0;
  JitterDistribution jitter_distribution = JitterDistribution::kUniform;
  double loss = 0.0;
  GilbertElliott ge;
  double duplicate = 0.0;
  double reorder = 0.0;
  int64_t reorder_ahead_ns = 1'000'000;
  uint64_t rate_bps = 0;     // 0 = unlimited (no queue)
  uint64_t queue_bytes = 0;  // 0 = default derived from rate
  double cross_share = 0.0;
  int64_t cross_burst_ns = 10'000'000;
  uint32_t cross_frame_bytes = 1500;
  std::vector<uint8_t> prio_dscp;
  std::vector<PortRange> prio_ports;
  uint64_t prio_queue_bytes = 0;  // 0 = the reserved class shares queue_bytes
  std::vector<DownWindow> down;
  uint64_t seed = 1;

  // Queue limit actually used (resolves the default): queue_bytes, or when 0, 50 ms at
  // rate_bps but at least 64 KiB; 0 when rate_bps == 0 (no queue, no limit).
  [[nodiscard]] uint64_t effective_queue_bytes() const noexcept;
  // A lower bound on the time from a frame's arrival to its release, whatever the draw: delay
  // plus the lowest jitter offset (JitterSampler::min_offset_ns) minus reorder_ahead when frames
  // are reordered; at least 0. Queueing and serialisation only add to it. The forwarder may leave arrivals
  // unread this long (they carry their kernel receive time) without releasing anything late.
  [[nodiscard]] int64_t min_delay_ns() const noexcept;

  // Field-by-field (doubles compare exactly): parse_spec(format_spec(s)) == s.
  bool operator==(const ImpairmentSpec&) const = default;
};

// Parses SPEC text (see above). Errors name the token: "'loss=120%': fraction must be in [0, 1]".
common::Result<ImpairmentSpec> parse_spec(std::string_view text);

// Applies tokens from `text` on top of `base` (used for run-time changes: "loss=1%").
common::Result<ImpairmentSpec> apply_spec(ImpairmentSpec base, std::string_view text);

// Checks cross-field rules (cross needs rate, jitter-dist known, windows ordered...).
common::Result<void> validate(const ImpairmentSpec& spec);

// Canonical text form; parse_spec(format_spec(s)) == s.
std::string format_spec(const ImpairmentSpec& spec);

}  // namespace detwan::wanem
