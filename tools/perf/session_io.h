#pragma once
// detwan-perf session datapath (private to the session code): batched receive with kernel
// timestamps, and the paced / batched test-stream senders shared by the client (forward) and
// the server (reverse). No allocation or exception per packet; buffers are sized at setup.
#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include <sys/socket.h>

#include "tools/perf/metrics.h"
#include "tools/perf/options.h"
#include "tools/perf/perf_wire.h"

namespace detwan::perf {

inline constexpr int64_t kNsPerSec = 1'000'000'000;
// Receive side of a test (client and server alike): datagrams per recvmmsg, batches drained per
// wake-up (bounded: timers keep running under a flood), per-packet records kept at most
// (--raw), and the socket's receive buffer.
inline constexpr size_t kReceiveBatch = 64;
inline constexpr int kMaxBatchesPerWake = 64;
inline constexpr size_t kMaxPacketRecords = 10'000'000;
inline constexpr int kReceiveBufferBytes = 8 << 20;

[[nodiscard]] int64_t realtime_ns() noexcept;
[[nodiscard]] int64_t monotonic_ns() noexcept;
// clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME) in steps of at most 100 ms so `stop` is seen.
// Returns false when stopped first.
bool sleep_until_realtime(int64_t deadline_ns, const std::atomic<bool>& stop) noexcept;

// recvmmsg with SO_TIMESTAMPNS: up to `batch` datagrams per call, each with its kernel receive
// time (CLOCK_REALTIME; the time of the call when the kernel gave none) and source address.
class DatagramReader {
 public:
  DatagramReader(size_t batch, size_t max_bytes);
  DatagramReader(const DatagramReader&) = delete;
  DatagramReader& operator=(const DatagramReader&) = delete;

  // Non-blocking. Returns how many datagrams were read (0 when none is pending).
  int receive(int fd) noexcept;

  [[nodiscard]] const uint8_t* data(int i) const noexcept { return buffers_.data() + slot(i); }
  // Datagram length; may exceed max_bytes (truncated(): the payload was cut).
  [[nodiscard]] size_t size(int i) const noexcept { return messages_[idx(i)].msg_len; }
  [[nodiscard]] bool truncated(int i) const noexcept {
    return (messages_[idx(i)].msg_hdr.msg_flags & MSG_TRUNC) != 0 || size(i) > max_bytes_;
  }
  [[nodiscard]] int64_t rx_ns(int i) const noexcept { return rx_ns_[idx(i)]; }
  [[nodiscard]] const sockaddr_storage& from(int i) const noexcept { return from_[idx(i)]; }
  [[nodiscard]] socklen_t from_length(int i) const noexcept {
    return messages_[idx(i)].msg_hdr.msg_namelen;
  }

 private:
  [[nodiscard]] static size_t idx(int i) noexcept { return static_cast<size_t>(i); }
  [[nodiscard]] size_t slot(int i) const noexcept { return idx(i) * max_bytes_; }

  size_t batch_;
  size_t max_bytes_;
  std::vector<uint8_t> buffers_;
  std::vector<iovec> iovecs_;
  std::vector<mmsghdr> messages_;
  std::vector<sockaddr_storage> from_;
  std::vector<std::array<char, 64>> controls_;
  std::vector<int64_t> rx_ns_;
};

// One destination of a test stream: a socket (connected, or with `to` set), the session id to
// stamp, and the per-destination send record.
struct StreamTarget {
  int fd = -1;
  const sockaddr_storage* to = nullptr;  // nullptr: the socket is connected
  socklen_t to_length = 0;
  uint32_t session = 0;
  StreamSender* sender = nullptr;
  const std::atomic<bool>* alive = nullptr;  // nullptr: always; false: skip this target
};

struct SendOutcome {
  uint64_t sent = 0;        // data packets per target (the same sequence numbers to each)
  int64_t first_tx_ns = 0;  // CLOCK_REALTIME of the first and last packet
  int64_t last_tx_ns = 0;
  uint64_t send_errors = 0;
};

// Sends the test stream of `spec` (stream mode: SendSchedule deadlines from start_ns on
// CLOCK_REALTIME; throughput mode: sendmmsg batches, paced at pps when bitrate_bps > 0) to every
// target, each packet back to back to all targets with the first target alternating, until
// duration, max_packets or `stop`. Then three kFin carrying the count. Sets this thread's timer
// slack to 1 ns.
SendOutcome run_stream_sender(const TestSpec& spec, uint64_t max_packets, int64_t start_ns,
                              std::span<StreamTarget> targets, const std::atomic<bool>& stop);

// Sends one header-only (or `size`-padded) packet; false on a send error.
bool send_packet(int fd, const sockaddr_storage* to, socklen_t to_length, const Packet& p,
                 size_t size) noexcept;

}  // namespace detwan::perf
