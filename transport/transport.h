#pragma once
// detwan transport: reliable, ordered message channels between two processes.
//
// A `Channel` carries messages (0 bytes to many GiB) in both directions, in order, complete and
// byte-exact, or fails with a clear error. The backend is chosen by name (`make_endpoint("udp")`,
// see transport/registry.h); the same contract holds for every backend:
//
//   udp       detwan's own protocol (transport/proto) over io_uring UDP sockets, directly or
//             through the local detwan-gw tunnel; segmentation, SACK, selective retransmission,
//             optional Reed-Solomon FEC, pacing at the reserved rate, multipath striping.
//   loopback  the same protocol over an in-memory network with injected loss, delay,
//             reordering, duplication and peer death (tests).
//   tcp       length-framed messages over one kernel TCP connection (best effort baseline).
//   shm       a shared-memory ring between two processes on the same host.
//   verbs     ibverbs RC queue pair (needs an RDMA device).
//
// Threading: every channel is driven by a progress thread owned by its endpoint. `send_async`,
// `recv_async`, `stats` and `close` may be called from any thread and never block. Completion
// callbacks run on the progress thread: they must not block; they may call send_async /
// recv_async again.
//
// Inline progress (EndpointOptions::inline_progress; udp and loopback): the endpoint has no
// thread of its own. One thread owns it (the first to call listen, accept, connect or progress)
// and runs its event loop by calling `Endpoint::progress()`; completion callbacks run inside
// that call. A request/response exchange then costs no cross-thread wake-up: the thread that
// sends is the one that waits on the socket for the reply (eRPC's and UCX's model). Channel
// calls may still come from other threads (they wake the owner's progress() like a datagram).
//
// Ownership: `send_async` does NOT copy the message (zero copy where the backend allows): the
// bytes must stay valid and unmodified until the completion callback has run. Received messages
// are handed over as an owned buffer.
//
// Errors: a failed operation completes with an Error (ErrorCode::kTimeout when the peer stopped
// answering for `peer_timeout_ns`, kUnavailable when the peer closed or the channel was closed
// locally, kInvalidArgument for a bad request). After a channel failure every pending and later
// operation completes with the same error, and the channel's buffers are freed.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/security.h"

namespace detwan::transport {

using common::Error;
using common::ErrorCode;
using common::Result;

// One path of a (possibly multipath) datagram channel. The udp backend sends the path's
// segments to `remote`; the protocol paces each path at its own `rate_bps` and stripes
// messages over the paths in proportion to their rates.
struct PathSpec {
  std::string remote;          // "host:port" (udp); ignored by other backends
  std::string local;           // optional local bind "host:port" for this path
  int64_t rate_bps = 0;        // reserved rate of this path; 0 = best effort (congestion control)
  // Bytes the rate limiter counts per datagram beyond the UDP payload: IPv4 20 + UDP 8 + L2
  // framing counted by the reservation (Ethernet 14 by default), + the gateway's tunnel
  // encapsulation when the path goes through detwan-gw. See docs/transport.md "Payload limit".
  int32_t frame_overhead_bytes = 42;
  // Largest burst (bytes on the wire, as counted with frame_overhead_bytes) the pacer may send
  // after its thread ran late: the reservation's policer depth, shared by every sender into it.
  // 0 = kPacerCatchUpNs of sending time (docs/transport.md "Pacing"). At least one datagram.
  int64_t max_burst_bytes = 0;
};

struct FecOptions {
  bool enabled = false;
  int32_t data_segments = 32;     // k: data segments per FEC block (1..128)
  int32_t parity_segments = 2;    // m: parity segments per block (0..32); upper bound if adaptive
  bool adaptive = true;           // choose m from the observed loss (m <= parity_segments)
  // Send parity for a partial block when the sender goes idle (covers a message's tail).
  bool protect_tail = true;
};

struct ChannelOptions {
  // Paths of a datagram channel (udp/loopback). Empty = one path to the connect() address with
  // rate `rate_bps`.
  std::vector<PathSpec> paths;
  int64_t rate_bps = 0;                       // single-path reserved rate; 0 = best effort
  // Single path: bytes its rate limiter counts per datagram beyond the UDP payload
  // (PathSpec::frame_overhead_bytes; through a detwan-gw tunnel, + the tunnel's per frame).
  int32_t frame_overhead_bytes = 42;
  int64_t max_burst_bytes = 0;                // single path: PathSpec::max_burst_bytes
  int32_t mtu_bytes = 1500;                   // IP MTU of the path; segments fit in it
  int64_t peer_timeout_ns = 5'000'000'000;    // no sign of life for this long = peer failed
  int64_t keepalive_interval_ns = 200'000'000;
  int64_t initial_rtt_ns = 100'000'000;       // RTT assumed before the first sample
  int64_t min_rto_ns = 5'000'000;
  // Receive window (flow control). 0 = automatic: max(4 MiB, 2 x sum(rate) x initial RTT
  // estimate), so that it is always >= rate x RTT.
  int64_t recv_window_bytes = 0;
  int64_t max_message_bytes = int64_t{16} << 30;
  // Memory for messages being received and received-but-not-yet-read: a message's buffer grows
  // as its segments arrive (64 MiB of address space first, 8x more at a time as data lands
  // beyond it, never to what the peer announces at once) and counts until the application
  // takes the message (recv). A segment that would take the total beyond this waits (it is
  // dropped, counted dropped_memory, and resent by the sender: back-pressure on a receiver
  // that does not read) unless its message is the next to
  // deliver and nothing is unread (no deadlock); so a peer can make this channel hold at most
  // this much plus one message of max_message_bytes, and only by sending it. The endpoint's
  // EndpointOptions::max_reassembly_bytes bounds all its channels together.
  int64_t max_reassembly_bytes = int64_t{4} << 30;
  // Memory the sender may hold for unacknowledged segments' metadata and FEC parity.
  int64_t send_buffer_bytes = int64_t{256} << 20;
  FecOptions fec;
};

struct ChannelStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_sent = 0;            // message payload bytes completed
  uint64_t bytes_received = 0;
  uint64_t segments_sent = 0;         // data segments incl. retransmissions
  uint64_t segments_retransmitted = 0;
  uint64_t fec_parity_sent = 0;
  uint64_t fec_recovered = 0;         // data segments rebuilt from parity
  uint64_t datagrams_received = 0;
  uint64_t dropped_corrupt = 0;       // checksum mismatch
  uint64_t dropped_malformed = 0;     // truncated / bad header / bad field
  uint64_t dropped_duplicate = 0;     // already received (duplicates and replays)
  uint64_t dropped_foreign = 0;       // other connection id
  uint64_t dropped_memory = 0;        // segments beyond max_reassembly_bytes (resent later)
  // Authenticated channels (EndpointOptions::security): datagrams whose tag (or HELLO_ACK MAC)
  // does not verify, or of the other protocol; and sealed datagrams whose packet number was
  // seen already or lies below the replay window. Both dropped before touching any state.
  uint64_t dropped_auth = 0;
  uint64_t dropped_replay = 0;
  uint64_t reassembly_bytes = 0;      // memory held now for messages being reassembled
  uint64_t timeouts = 0;              // retransmission timeouts fired
  // Multipath: a path with data in flight and nothing acknowledged for 3 srtt (+ 10 ms) while
  // another path's data is acknowledged is declared failed: its segments are resent on the
  // others and it only carries a probe segment now and then until one is acknowledged.
  uint64_t paths_failed = 0;
  uint64_t paths_recovered = 0;
  int64_t srtt_ns = 0;
  int64_t rttvar_ns = 0;
  int64_t cwnd_bytes = 0;             // best effort only (0 on reserved paths)
  int64_t reserved_rate_bps = 0;      // the reserved paths' pacing rates, summed (0: none)
  double loss_estimate = 0.0;         // fraction of data segments lost, smoothed
  int32_t fec_parity_current = 0;     // m chosen by the adaptive policy
  uint64_t recv_buffers_reused = 0;   // received messages placed in a recycle()d buffer
  uint64_t acks_piggybacked = 0;      // ACKs that rode on a DATA instead of a datagram of their own
};

class PacingGroup;  // transport/pacing_group.h

using SendCallback = std::function<void(Result<void>)>;
using RecvCallback = std::function<void(Result<std::vector<std::byte>>)>;

class Channel {
 public:
  virtual ~Channel() = default;
  Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Queues `message` for sending. Never blocks. `done` runs once, on the progress thread, when
  // the peer has acknowledged every byte (or with the channel's error).
  virtual void send_async(std::span<const std::byte> message, SendCallback done) = 0;
  // Asks for the next message in order. Never blocks. Receives complete in the order posted.
  virtual void recv_async(RecvCallback done) = 0;
  // Hands back a received message's buffer once the caller is done with it: the channel may
  // place a later message in it (its pages are mapped already) instead of allocating. Optional
  // (a backend that does not pool drops it); any thread; never blocks for long.
  virtual void recycle(std::vector<std::byte> buffer) { (void)buffer; }
  [[nodiscard]] virtual ChannelStats stats() const = 0;
  // Graceful close: pending operations complete with kUnavailable; the peer sees the close.
  virtual void close() = 0;
  // Re-paces a single-path reserved channel (created with rate_bps > 0) at `rate_bps`, its
  // catch-up burst at most `max_burst_bytes` (0: unchanged): for a share learned after the
  // channel exists. Takes effect on the progress thread shortly after; best-effort and
  // multipath channels, and backends without a pacer (tcp, shm), ignore it. Never blocks.
  virtual void set_reserved_rate(int64_t rate_bps, int64_t max_burst_bytes) {
    (void)rate_bps;
    (void)max_burst_bytes;
  }
  // Paces the channel's reserved path through `group` as well (transport/pacing_group.h): the
  // channels of one group together never exceed its rate. null leaves the group. Takes effect on
  // the progress thread shortly after; backends without a pacer (tcp, shm) ignore it.
  virtual void set_pacing_group(std::shared_ptr<PacingGroup> group) { (void)group; }
  [[nodiscard]] virtual std::string describe() const = 0;  // "udp 10.0.0.1:4000 -> ..."

  // Future-based conveniences over the callbacks.
  std::future<Result<void>> send(std::span<const std::byte> message);
  std::future<Result<std::vector<std::byte>>> recv();
};

// An endpoint owns the progress thread(s) and the sockets/queues of one backend. It accepts
// channels from peers and connects to peers. Setup tier: these calls may block and return
// Result with a message naming the problem.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Starts listening on `address` (backend syntax; port 0 picks one). Returns the bound
  // address in the form connect() accepts.
  virtual Result<std::string> listen(const std::string& address) = 0;
  // Waits up to `timeout_ns` for the next peer to connect.
  virtual Result<std::unique_ptr<Channel>> accept(int64_t timeout_ns) = 0;
  virtual Result<std::unique_ptr<Channel>> connect(const std::string& address,
                                                   const ChannelOptions& options,
                                                   int64_t timeout_ns) = 0;
  [[nodiscard]] virtual std::string backend_name() const = 0;

  // Inline progress only (EndpointOptions::inline_progress): runs the endpoint's event loop on
  // the calling thread (posted calls, sends, timers, received datagrams) until at least one
  // completion callback ran or `timeout_ns` passed; 0 = one pass that does not wait. Returns
  // how many callbacks ran. kInvalidArgument on an endpoint with its own progress thread or
  // from a thread other than the owner; kUnavailable once the endpoint is shutting down.
  virtual Result<size_t> progress(int64_t timeout_ns) {
    (void)timeout_ns;
    return common::make_error(ErrorCode::kInvalidArgument,
                              backend_name() +
                                  ": progress() needs an endpoint made with "
                                  "inline_progress (this one runs its own progress "
                                  "thread)");
  }
};

struct EndpointOptions {
  // Options for channels accepted by listen()/accept() (connect() passes its own).
  ChannelOptions accept_options;
  // Backend-specific free-form settings, e.g. loopback fault injection ("loss=0.01,delay=1ms").
  std::string backend_config;
  // No progress thread: the owning thread drives the endpoint with Endpoint::progress() (see
  // "Inline progress" above). udp and loopback; the other backends refuse it (kInvalidArgument).
  bool inline_progress = false;
  // Memory all of this endpoint's channels together may hold for messages being received and
  // received-but-unread (udp, loopback; ChannelOptions::max_reassembly_bytes bounds each
  // channel). Allocated as data arrives, never as announced: a segment that would take the
  // total beyond this is dropped (dropped_memory) and resent by its sender later.
  int64_t max_reassembly_bytes = int64_t{16} << 30;
  // Who may talk to this endpoint (transport/security.h): the key its channels, accepted and
  // connected, authenticate with. Network backends refuse to run without a key unless the
  // mode is kNone.
  Security security;
};

}  // namespace detwan::transport
