#pragma once
// Exact instants on a line of rate_bps. Serialisation times are rarely whole nanoseconds
// (64 bytes at 10 Gbit/s = 51.2 ns); rounding each frame up would lose up to 1 ns per frame
// (2 % of a link full of small frames). Keeping the remainder as a fraction of a nanosecond
// makes back-to-back frames exact over any number of frames.
#include <compare>
#include <cstdint>

namespace detwan::dataplane::sched {

__extension__ typedef unsigned __int128 Uint128;  // __extension__: no -Wpedantic error

// ns + frac / rate_bps nanoseconds, with 0 <= frac < rate_bps of the line it belongs to.
struct LinkTime {
  int64_t ns = 0;
  uint64_t frac = 0;

  static constexpr LinkTime at(int64_t ns) noexcept { return LinkTime{ns, 0}; }
  // First whole nanosecond at or after this instant.
  [[nodiscard]] constexpr int64_t ceil_ns() const noexcept { return ns + (frac != 0 ? 1 : 0); }

  friend constexpr auto operator<=>(const LinkTime&, const LinkTime&) = default;
};

// t + bits / rate_bps seconds, exactly. rate_bps must be > 0.
constexpr LinkTime add_bits(LinkTime t, uint64_t bits, uint64_t rate_bps) noexcept {
  const Uint128 numerator =
      static_cast<Uint128>(t.frac) + static_cast<Uint128>(bits) * 1'000'000'000u;
  return LinkTime{t.ns + static_cast<int64_t>(numerator / rate_bps),
                  static_cast<uint64_t>(numerator % rate_bps)};
}

// Serialisation time of `bits` at rate_bps, rounded up to a whole nanosecond. rate_bps > 0.
constexpr int64_t ceil_serialisation_ns(uint64_t bits, uint64_t rate_bps) noexcept {
  const Uint128 numerator = static_cast<Uint128>(bits) * 1'000'000'000u;
  return static_cast<int64_t>((numerator + rate_bps - 1) / rate_bps);
}

// floor(a / b) for b > 0 (C++ division truncates towards zero).
constexpr int64_t floor_div(int64_t a, int64_t b) noexcept {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace detwan::dataplane::sched
