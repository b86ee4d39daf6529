#pragma once
// Helpers shared by the scheduler tests: a seeded random source that is the same on every
// platform, and an oracle for slot ownership written independently of GateControlList (it
// works slot by slot from the configuration, not from the list's windows).
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dataplane/sched/gate_control_list.h"

namespace detwan::dataplane::sched::testing {

inline constexpr uint32_t kUnreserved = UINT32_MAX;

// Seeded randomness; the std:: engines are specified exactly, the distributions are not, so
// the few we need are written out here.
class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}
  uint64_t next() { return engine_(); }
  // Uniform in [lo, hi].
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + next() % (hi - lo + 1); }
  double uniform_open01() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Exponential with the given mean, in whole ns (at least 1).
  int64_t exponential_ns(double mean_ns) {
    const auto v = static_cast<int64_t>(-std::log(uniform_open01()) * mean_ns);
    return v < 1 ? 1 : v;
  }

 private:
  std::mt19937_64 engine_;
};

// Slot ownership straight from the configuration: tunnel id per slot, kUnreserved if free.
class SlotOracle {
 public:
  explicit SlotOracle(const GclConfig& config)
      : config_(config), owner_(config.slot_count, kUnreserved) {
    for (const GclTunnel& tunnel : config.tunnels) {
      for (const uint32_t slot : tunnel.slots) owner_[slot] = tunnel.tunnel_id;
    }
  }

  [[nodiscard]] int64_t slot_ns() const { return config_.cycle_ns / config_.slot_count; }
  // Absolute slot number of t (counted from base_time, floor).
  [[nodiscard]] int64_t slot_number(int64_t t_ns) const {
    const int64_t d = t_ns - config_.base_time_ns;
    return d >= 0 ? d / slot_ns() : -((-d + slot_ns() - 1) / slot_ns());
  }
  [[nodiscard]] uint32_t owner_of_number(int64_t n) const {
    const auto s = static_cast<int64_t>(config_.slot_count);
    return owner_[static_cast<size_t>(((n % s) + s) % s)];
  }
  [[nodiscard]] int64_t start_of_number(int64_t n) const {
    return config_.base_time_ns + n * slot_ns();
  }

  // Empty if the frame occupying [start_ns, end_ns) (end = end of serialisation) stays inside
  // slots of `owner` and, where the next slot belongs to someone else, ends guard_ns before
  // the slot does; otherwise a description of the violation.
  [[nodiscard]] std::string check(uint32_t owner, int64_t start_ns, int64_t end_ns) const {
    if (end_ns <= start_ns) return "empty interval";
    const int64_t first = slot_number(start_ns);
    const int64_t last = slot_number(end_ns - 1);
    for (int64_t n = first; n <= last; ++n) {
      if (owner_of_number(n) != owner) {
        return "[" + std::to_string(start_ns) + ", " + std::to_string(end_ns) + ") touches slot " +
               std::to_string(n % config_.slot_count) + " owned by " +
               std::to_string(owner_of_number(n));
      }
    }
    const bool owner_has_all = [&] {
      for (const uint32_t o : owner_) {
        if (o != owner) return false;
      }
      return true;
    }();
    if (!owner_has_all && owner_of_number(last + 1) != owner &&
        end_ns > start_of_number(last + 1) - config_.guard_ns) {
      return "[" + std::to_string(start_ns) + ", " + std::to_string(end_ns) +
             ") ends inside the guard band before " + std::to_string(start_of_number(last + 1));
    }
    return "";
  }

  // Earliest integer start >= t_ns for a frame of `bytes` under the departure rule, by brute
  // force over slot starts (kNever if none within three cycles).
  [[nodiscard]] int64_t earliest_start(uint32_t owner, uint32_t bytes, int64_t t_ns) const {
    // s + bytes*8/rate <= boundary - guard  <=>  ceil(s + bytes*8/rate) <= boundary - guard.
    const auto fits = [&](int64_t s) {
      const Uint128 bits_ns = static_cast<Uint128>(bytes) * 8 * 1'000'000'000;
      const auto ser_ceil =
          static_cast<int64_t>((bits_ns + config_.line_rate_bps - 1) / config_.line_rate_bps);
      return check(owner, s, s + ser_ceil).empty();
    };
    if (fits(t_ns)) return t_ns;
    const int64_t first = slot_number(t_ns) + 1;
    for (int64_t n = first; n < first + 3 * static_cast<int64_t>(config_.slot_count); ++n) {
      if (owner_of_number(n) == owner && owner_of_number(n - 1) != owner &&
          fits(start_of_number(n))) {
        return start_of_number(n);
      }
    }
    return kNever;
  }

 private:
  GclConfig config_;
  std::vector<uint32_t> owner_;
};

inline std::vector<uint32_t> slot_range(uint32_t first, uint32_t last) {
  std::vector<uint32_t> out;
  for (uint32_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

// The port of the scheduler tests: 10 Gbit/s (1250 bytes = 1000 ns), cycle 100 us = 10 slots
// of 10 us, guard 1 us. Tunnel 7: slots 0-3 (window [0, 40 us), usable end 39 us). Tunnel 9:
// slot 5 ([50, 60 us)). Best effort: slots 4 and 6-9.
inline GclConfig ten_slot_port() {
  GclConfig config;
  config.cycle_ns = 100'000;
  config.slot_count = 10;
  config.guard_ns = 1'000;
  config.line_rate_bps = 10'000'000'000;
  config.max_frame_bytes = 1500;
  config.tunnels = {GclTunnel{7, 3'000'000'000, slot_range(0, 3)}, GclTunnel{9, 500'000'000, {5}}};
  return config;
}

}  // namespace detwan::dataplane::sched::testing
