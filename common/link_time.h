#pragma once
// Exact instants on a link that runs at rate_bps. Serialisation times are rarely whole
// nanoseconds (64 bytes at 10 Gbit/s = 51.2 ns; 1514 bytes at 3 Gbit/s = 4037.33 ns); rounding
// each frame would lose up to 1 ns per frame (2 % of a link full of small frames). Keeping the
// remainder as a fraction of a nanosecond makes back-to-back frames exact over any number of
// frames, with no drift. Used by the slot scheduler (dataplane/sched) and the WAN emulator.
#include <compare>
#include <cstdint>

namespace detwan::common {

__extension__ typedef unsigned __int128 LinkUint128;  // __extension__: no -Wpedantic error

// ns + frac / rate_bps nanoseconds, with 0 <= frac < rate_bps of the link it belongs to
// (frac is 0 when rate_bps is 0).
struct LinkTime {
  int64_t ns = 0;
  uint64_t frac = 0;

  static constexpr LinkTime at(int64_t ns) noexcept { return LinkTime{ns, 0}; }
  // First whole nanosecond at or after this instant.
  [[nodiscard]] constexpr int64_t ceil_ns() const noexcept { return ns + (frac != 0 ? 1 : 0); }

  friend constexpr auto operator<=>(const LinkTime&, const LinkTime&) = default;
};

// t + bits / rate_bps seconds, exactly. rate_bps == 0 is an infinitely fast link: returns t.
constexpr LinkTime add_bits(LinkTime t, uint64_t bits, uint64_t rate_bps) noexcept {
  if (rate_bps == 0) return t;
  const LinkUint128 numerator =
      static_cast<LinkUint128>(t.frac) + static_cast<LinkUint128>(bits) * 1'000'000'000u;
  return LinkTime{t.ns + static_cast<int64_t>(numerator / rate_bps),
                  static_cast<uint64_t>(numerator % rate_bps)};
}

// Serialisation time of `bits` at rate_bps, rounded up to a whole nanosecond. rate_bps > 0.
constexpr int64_t ceil_serialisation_ns(uint64_t bits, uint64_t rate_bps) noexcept {
  const LinkUint128 numerator = static_cast<LinkUint128>(bits) * 1'000'000'000u;
  return static_cast<int64_t>((numerator + rate_bps - 1) / rate_bps);
}

// Number of k >= 0 with t + k * bits / rate_bps <= now_ns, for t <= now_ns, bits > 0 and
// rate_bps > 0. May be huge; callers cap it.
constexpr uint64_t steps_until(LinkTime t, uint64_t bits, uint64_t rate_bps,
                               int64_t now_ns) noexcept {
  const LinkUint128 span = static_cast<LinkUint128>(now_ns - t.ns) * rate_bps - t.frac;
  const LinkUint128 k = span / (static_cast<LinkUint128>(bits) * 1'000'000'000u) + 1;
  return k > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(k);
}

// floor(a / b) for b > 0 (C++ division truncates towards zero).
constexpr int64_t floor_div(int64_t a, int64_t b) noexcept {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace detwan::common
