#pragma once
// Exact instants on a link that runs at rate_bps. Serialisation times are rarely whole
// nanoseconds (1514 bytes at 3 Gbit/s = 4037.33 ns); keeping the remainder as a fraction of a
// nanosecond makes back-to-back frames exact over any number of frames, with no drift.
#include <compare>
#include <cstdint>

namespace detwan::wanem {

// ns + frac / rate_bps nanoseconds, 0 <= frac < rate_bps (frac is 0 when rate_bps is 0).
struct LinkTime {
  int64_t ns = 0;
  uint64_t frac = 0;

  static LinkTime at(int64_t ns) noexcept { return LinkTime{ns, 0}; }
  // First whole nanosecond at or after this instant.
  [[nodiscard]] int64_t ceil_ns() const noexcept { return ns + (frac != 0 ? 1 : 0); }

  friend auto operator<=>(const LinkTime&, const LinkTime&) = default;
};

__extension__ typedef unsigned __int128 LinkU128;

// t + bits / rate_bps seconds. rate_bps == 0 is an infinitely fast link: returns t.
inline LinkTime add_bits(LinkTime t, uint64_t bits, uint64_t rate_bps) noexcept {
  if (rate_bps == 0) return t;
  const LinkU128 numerator =
      static_cast<LinkU128>(t.frac) + static_cast<LinkU128>(bits) * 1'000'000'000u;
  return LinkTime{t.ns + static_cast<int64_t>(numerator / rate_bps),
                  static_cast<uint64_t>(numerator % rate_bps)};
}

// Number of k >= 0 with t + k * bits / rate_bps <= now_ns, for t <= now_ns, bits > 0 and
// rate_bps > 0. May be huge; callers cap it.
inline uint64_t steps_until(LinkTime t, uint64_t bits, uint64_t rate_bps, int64_t now_ns) noexcept {
  const LinkU128 span = static_cast<LinkU128>(now_ns - t.ns) * rate_bps - t.frac;
  const LinkU128 k = span / (static_cast<LinkU128>(bits) * 1'000'000'000u) + 1;
  return k > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(k);
}

}  // namespace detwan::wanem
