#pragma once
// The per-packet contract between detwan-wanem's forwarding loop and a packet I/O backend.
//
// A Port serves both interfaces of the bump in the wire (side A and side B) and owns ONE buffer
// pool shared by both, so a frame received on A is transmitted on B without a copy. Frames are
// named by opaque `uint64_t` handles (a pool index for packet/, an rte_mbuf* for dpdk/); the
// impairment engine stores these handles and never looks inside.
//
// Ownership: rx_burst() and clone() hand a frame to the caller; tx_burst() takes back the frames
// it consumed; free() takes back one frame. Every handle is returned exactly once.
//
// Threading: every method is owned by one thread (the poll thread, `_st` in the forwarder).
//
// Blocking and errors: no method blocks, throws, allocates from the heap or logs. A frame the
// port cannot accept (oversize, pool empty, send error) is dropped inside the port and counted in
// counters().drops; "busy, try again" (socket buffer or tx ring full) is a normal result and
// leaves the frame with the caller.
#include <concepts>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace detwan::wanem {

enum class Side : uint8_t { kA = 0, kB = 1 };
inline constexpr int kSideCount = 2;
[[nodiscard]] constexpr int index_of(Side side) noexcept { return static_cast<int>(side); }
[[nodiscard]] constexpr Side other(Side side) noexcept {
  return side == Side::kA ? Side::kB : Side::kA;
}

// Why a frame died outside the impairment engine. The engine counts its own drops (loss, queue,
// link down); these are the I/O and forwarding reasons.
enum class PortDrop : uint8_t {
  kOversize = 0,  // received frame larger than a pool buffer (e.g. a GSO super-frame)
  kPoolEmpty,     // no free buffer / mbuf when a frame arrived
  kRxError,       // receive call failed with an unexpected error
  kRxKernel,      // dropped by the kernel before we read it (socket buffer full)
  kTxError,       // send failed for this frame (it is dropped, not retried)
  kTxBusy,        // device stayed busy longer than the tx retry limit
  kNotDelivered,  // the engine released it with deliver == false (link went down meanwhile)
  kCloneFailed,   // a duplicate could not be made (pool empty)
  kCount
};
std::string_view to_string(PortDrop drop) noexcept;

struct SideCounters {
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
};

struct PortCounters {
  SideCounters side[kSideCount];
  // packet backend with receive rings: frames read in place, and those copied out of the ring
  // because they were held too long (the kernel was about to need their slot) or were the last
  // one read (poll() looks at it).
  uint64_t rx_in_place = 0;
  uint64_t rx_spilled = 0;
  uint64_t drops[static_cast<int>(PortDrop::kCount)] = {};

  void count_drop(PortDrop drop, uint64_t n = 1) noexcept { drops[static_cast<int>(drop)] += n; }
};

// {"a":{"rx_packets":..,"rx_bytes":..,"tx_packets":..,"tx_bytes":..},"b":{..},
//  "rx":<a+b rx_packets>,"tx":<a+b tx_packets>,"rx_in_place":..,"rx_spilled":..,
//  "drops":{"oversize":..,...}}
std::string port_counters_json(const PortCounters& counters);

// clang-format off
template <typename P>
concept Port = requires(P& port, const P& const_port, Side side, uint64_t* handles,
                        const uint64_t* const_handles, uint32_t count, uint64_t handle) {
  // Receives up to `count` frames from `side` into handles[0..n) and returns n (0 when nothing
  // is waiting). Must not block. Oversize and pool-exhausted frames are consumed and counted.
  { port.rx_burst(side, handles, count) } noexcept -> std::same_as<uint32_t>;
  // Sends handles[0..count) out of `side`, in order. Returns how many it consumed (sent, or
  // dropped and counted as kTxError); the frames from the return value on stay with the caller
  // (device busy: try again later). Must not block.
  { port.tx_burst(side, const_handles, count) } noexcept -> std::same_as<uint32_t>;
  // Copies a frame into a new handle (for duplication). kBusy when the pool is empty.
  { port.clone(handle, handles) } noexcept -> std::same_as<common::Status>;
  { port.free(handle) } noexcept -> std::same_as<void>;
  // First contiguous bytes of the frame (the headers the classifier reads) and their count;
  // frame_bytes() is the whole L2 frame, what the rate limiter charges.
  { const_port.data(handle) } noexcept -> std::same_as<const uint8_t*>;
  { const_port.data_bytes(handle) } noexcept -> std::same_as<uint32_t>;
  { const_port.frame_bytes(handle) } noexcept -> std::same_as<uint32_t>;
  // When the frame arrived (kernel receive timestamp, CLOCK_MONOTONIC ns), or 0 if the backend
  // cannot tell. Lets the engine time a frame from its arrival rather than from when the poll
  // thread got to read it, so scheduling delays of the reader do not add to the emulated delay.
  { const_port.rx_time_ns(handle) } noexcept -> std::same_as<int64_t>;
  // True when rx_time_ns() never returns 0: arrivals may then be left unread for a while
  // (ForwarderOptions::rx_coalesce_ns) and still be timed exactly.
  { const_port.rx_timestamps() } noexcept -> std::same_as<bool>;
  // A file descriptor that polls readable when `side` has frames, or -1 if the backend can only
  // be busy-polled. Frames may be waiting even when it does not poll readable only right after
  // rx_burst() returned a full burst.
  { const_port.rx_fd(side) } noexcept -> std::same_as<int>;
  // Counters; refresh_counters_st() folds in slow-to-read sources (kernel drop counters) and is
  // called only when somebody asks for them, never per packet.
  { port.counters() } noexcept -> std::same_as<PortCounters&>;
  { port.refresh_counters_st() } -> std::same_as<void>;
};
// clang-format on

}  // namespace detwan::wanem
