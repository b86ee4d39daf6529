#pragma once
// Why the receive side of the tunnel wire format drops a packet: one value per reason, each with
// a stable counter name ("too_short", "bad_magic", ...) that `detwan-gw stats` prints. The
// meaning of every reason is in docs/wire-format.md ("Receiver rules").
//
// This header (like the rest of the wire core) depends only on the standard library, so the
// libFuzzer target compiles it with clang 14, whose libstdc++ lacks std::expected.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace detwan::dataplane::wire {

enum class DropReason : uint8_t {
  // Tunnel header (decode).
  kTooShort = 0,    // fewer bytes than the fixed header
  kBadMagic,        // not a detwan tunnel packet (foreign traffic)
  kBadVersion,      // a detwan packet of a version this receiver does not speak
  kReservedSet,     // a reserved flag bit, the reserved header word or a reserved body field != 0
  kBadFlags,        // flag combination that has no meaning (none/both of D and C, C with R or F)
  kBadType,         // type value unknown for the packet class (data or control)
  kBadTunnelId,     // tunnel id 0
  kBadTimestamp,    // a timestamp >= 2^63 (does not fit int64_t nanoseconds)
  kOversize,        // payload above the receiver's maximum payload size
  kLengthMismatch,  // payload length field != bytes after the header (truncated or trailing)
  // Control bodies (decode_control).
  kControlLength,  // body size differs from the fixed size of its control type
  kBadControl,     // a control field out of its range (e.g. keepalive interval, t3 < t2)
  // Replay / duplicate window.
  kDuplicate,  // sequence number already accepted (a replay, or the second PREOF copy)
  kTooOld,     // sequence number below the window
  kCount,
};

inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::kCount);

// Counter name: "too_short", "bad_magic", ...; "unknown" for values out of range.
std::string_view to_string(DropReason reason) noexcept;

// Per-reason drop counters. Plain integers: owned and written by one datapath thread; a stats
// reader takes a copy through that thread (the struct is trivially copyable).
struct DropCounters {
  std::array<uint64_t, kDropReasonCount> by_reason{};

  void add(DropReason reason) noexcept {
    const auto i = static_cast<std::size_t>(reason);
    if (i < kDropReasonCount) ++by_reason[i];
  }
  [[nodiscard]] uint64_t operator[](DropReason reason) const noexcept {
    const auto i = static_cast<std::size_t>(reason);
    return i < kDropReasonCount ? by_reason[i] : 0;
  }
  [[nodiscard]] uint64_t total() const noexcept;
  DropCounters& operator+=(const DropCounters& other) noexcept;
};

// {"too_short":0,"bad_magic":3,...}: every reason, in enum order, zeros included, so the set of
// keys never depends on traffic. No "total" key: a reader summing the values gets the total.
std::string to_json(const DropCounters& counters);

}  // namespace detwan::dataplane::wire
