#pragma once
// Control bodies the gateways exchange over a tunnel (flag C set, Type = ControlType). Each
// body has a fixed size per type; fields are 64-bit, network order. docs/wire-format.md
// ("Control packets") is the source of truth.
//
//   time request  (32 bytes): exchange_id, t1, 16 reserved bytes (zero)
//   time response (32 bytes): exchange_id, t1 (echoed), t2, t3
//   keepalive     (40 bytes): counter, interval_ns, last_rx_counter, epoch, echo_epoch
//
// Every control packet's header carries the sender's session epoch in its cycle_id field (a
// control packet leaves in no cycle of its own): an authenticated receiver picks the key that
// opens it from that epoch, refuses its own epoch (a reflection) before any work, and a
// keepalive's body epoch must equal it (bad_control otherwise).
//
// The two-way time exchange is NTP's: A sends a request at t1 (A's clock); B receives it at t2
// and answers at t3 (B's clock); A receives the answer at t4 (A's clock, not on the wire). The
// request is padded to the response's size so answering never amplifies traffic and both
// directions serialize equally long.
//
// Threading: pure functions; no allocation, exceptions or logging.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>

#include "dataplane/wire/decoded.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::wire {

inline constexpr std::size_t kTimeRequestBodySize = 32;
inline constexpr std::size_t kTimeResponseBodySize = 32;
inline constexpr std::size_t kKeepaliveBodySize = 40;
inline constexpr std::size_t kMaxControlBodySize = 40;

// Keepalive interval range a receiver accepts (1 us .. 1 h).
inline constexpr int64_t kMinKeepaliveIntervalNs = 1'000;
inline constexpr int64_t kMaxKeepaliveIntervalNs = 3'600'000'000'000;

struct TimeRequest {
  uint64_t exchange_id = 0;  // chosen by the requester, echoed in the response; any value
  int64_t t1_ns = 0;         // requester's TAI transmit time; >= 0

  friend constexpr bool operator==(const TimeRequest&, const TimeRequest&) = default;
};

struct TimeResponse {
  uint64_t exchange_id = 0;  // copied from the request
  int64_t t1_ns = 0;         // copied from the request; >= 0
  int64_t t2_ns = 0;         // responder's TAI receive time of the request; >= 0
  int64_t t3_ns = 0;         // responder's TAI transmit time of this response; >= t2_ns

  friend constexpr bool operator==(const TimeResponse&, const TimeResponse&) = default;
};

struct Keepalive {
  uint64_t counter = 1;          // per sender and path, +1 per keepalive, starts at 1; 0 invalid
  int64_t interval_ns = 0;       // the sender's keepalive period, in [kMin.., kMax..IntervalNs]
  uint64_t last_rx_counter = 0;  // highest counter received from the peer on this path; 0: none
  // The sender's session epoch: drawn at random (never 0) each time the gateway starts. A new
  // value from a peer means the peer restarted: its sequence numbers start again.
  uint64_t epoch = 1;
  // The receiver's epoch as the sender last heard it (0: none yet). With last_rx_counter it
  // answers the receiver's recent keepalives, which is how a receiver tells a peer that really
  // restarted from a keepalive of an earlier boot replayed to it (docs/wire-format.md,
  // "Keepalive").
  uint64_t echo_epoch = 0;

  friend constexpr bool operator==(const Keepalive&, const Keepalive&) = default;
};

using ControlBody = std::variant<TimeRequest, TimeResponse, Keepalive>;

[[nodiscard]] ControlType type_of(const ControlBody& body) noexcept;

// Fixed body size of a control type; 0 for an unknown type.
[[nodiscard]] std::size_t body_size(ControlType type) noexcept;

// The rules a receiver applies to a body's fields: bad_timestamp (a time < 0), bad_control
// (t3 < t2, counter 0, interval out of range, epoch 0). nullopt: valid.
[[nodiscard]] std::optional<DropReason> validate(const ControlBody& body) noexcept;

// Parses the body of a packet decode() accepted. Checks, in order: the packet is a control
// packet (bad_flags) of a known type (bad_type), the payload has the type's size
// (control_length), reserved bytes are zero (reserved_set), the header's epoch (cycle_id) is
// not 0 and a keepalive's body epoch equals it (bad_control), then validate(body).
[[nodiscard]] Decoded<ControlBody> decode_control(const PacketView& packet) noexcept;

// Writes header + body to the front of `out`. The header's flags (C, and A if `header` has it),
// type and payload_length (the body's size: an authenticated packet is sealed next, which adds
// the tag) are set from the body; tunnel_id, path_id, sequence, cycle_id (the sender's epoch,
// != 0), tx_time_ns and session come from `header`.
// kInvalidHeader if the header or the body would be dropped by a receiver. Writes nothing
// unless it returns kOk; size is kHeaderSize + body_size(type_of(body)).
EncodeResult encode_control(const TunnelHeader& header, const ControlBody& body,
                            std::span<std::byte> out) noexcept;

// One clock-offset sample from a completed exchange (NTP, RFC 5905 section 8):
//   offset = ((t2 - t1) + (t3 - t4)) / 2   (peer clock minus local clock, rounded toward 0)
//   rtt    = (t4 - t1) - (t3 - t2)         (network round trip, responder time excluded)
struct ClockSample {
  int64_t offset_ns = 0;
  int64_t rtt_ns = 0;

  friend constexpr bool operator==(const ClockSample&, const ClockSample&) = default;
};

// nullopt when the four times cannot come from one real exchange: a time < 0, t3 < t2, a
// negative round trip (t4 - t1 < t3 - t2) or one that does not fit in int64_t. Safe for any
// input values (no overflow).
[[nodiscard]] std::optional<ClockSample> clock_sample(const TimeResponse& response,
                                                      int64_t t4_ns) noexcept;

}  // namespace detwan::dataplane::wire
