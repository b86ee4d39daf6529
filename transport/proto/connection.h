#pragma once
// The detwan transport protocol as a sans-I/O state machine (docs/transport.md).
//
// A Connection owns one side of a reliable, ordered message channel over one or more datagram
// paths. It never touches a socket or a clock: the driver (transport/datagram/) feeds it
// received datagrams and the current time, pulls datagrams to send, sleeps until
// `next_wakeup_ns()`, and pops events (send completions, received messages, failure).
// The same object therefore runs over io_uring UDP, the in-memory loopback network and in unit
// tests on a virtual clock.
//
// Thread ownership: a Connection belongs to one thread (its driver's progress thread); nothing
// in it is synchronised.
//
// Datapath rules: on_datagram / poll_transmit never throw and never allocate per packet for
// errors; bad input returns a counted Status. queue_message / reassembly allocate per message.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "transport/buffer_pool.h"
#include "transport/proto/handshake.h"
#include "transport/proto/memory_budget.h"
#include "transport/transport.h"

namespace detwan::transport::proto {

using common::Status;

enum class Role : uint8_t { kClient, kServer };

struct ConnectionConfig {
  Role role = Role::kClient;
  uint64_t connection_id = 0;     // chosen by the client (random); the server adopts it
  ChannelOptions options;         // options.paths.size() >= 1 (driver fills it)
  // Where received messages' buffers come from (Channel::recycle hands them back); nullptr =
  // a fresh vector each. Must outlive the connection.
  BufferPool* rx_pool = nullptr;
  // Memory all channels of the endpoint share for messages being received and unread
  // (EndpointOptions::max_reassembly_bytes); nullptr = no endpoint-wide bound. Must outlive
  // the connection.
  MemoryBudget* endpoint_budget = nullptr;
  // Authenticated channels (transport/proto/handshake.h): the endpoint's keys, which must
  // outlive the connection. nullptr, or a keyring of mode kNone: the plain protocol (CRC32C).
  // A client proves the key in its HELLO and checks the server's in the HELLO_ACK.
  Keyring* keyring = nullptr;
  // Server of an authenticated channel: what its acceptor agreed (the channel's keys and the
  // client's HELLO); the connection starts established. Copied; nullptr on the plain protocol.
  const AcceptedHandshake* accepted = nullptr;
};

struct Event {
  enum class Kind : uint8_t {
    kEstablished,     // handshake done (client: HELLO_ACK received; server: HELLO received)
    kSendComplete,    // `token` fully acknowledged
    kMessage,         // `message` received in order
    kFailed,          // the connection failed; `error` says why; no further events
    kClosed,          // the peer closed gracefully
  };
  Kind kind = Kind::kFailed;
  uint64_t token = 0;
  std::vector<std::byte> message;
  Error error;
};

// Where a datagram goes / came from: the path index into options.paths.
struct Transmit {
  size_t size_bytes = 0;   // bytes written into the caller's buffer; 0 = nothing to send now
  uint32_t path = 0;
};

class ConnectionImpl;

class Connection {
 public:
  Connection(const ConnectionConfig& config, int64_t now_ns);
  ~Connection();
  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;

  // Queues a message. The bytes are read in place until kSendComplete(token) (zero copy).
  // Returns kInvalidArgument if larger than max_message_bytes, kClosed after failure/close.
  Status queue_message(std::span<const std::byte> message, uint64_t token);

  // Feeds one received datagram that arrived on `path` at `now_ns`. Malformed, corrupt,
  // duplicate, replayed or foreign datagrams return a Status and are counted in stats(). On an
  // authenticated channel a datagram that does not open (dropped_auth) or whose packet number
  // was seen (dropped_replay) is refused before it touches any other state.
  Status on_datagram(uint32_t path, std::span<const std::byte> datagram, int64_t now_ns);

  // Writes the next datagram to send at `now_ns` into `out` (at least max_datagram_bytes()).
  // Returns size 0 when nothing may be sent now (nothing queued, pacing, flow control window).
  Transmit poll_transmit(int64_t now_ns, std::span<std::byte> out);

  // Earliest time at which poll_transmit or a timer has something to do (pacing release,
  // retransmission timeout, keepalive, peer timeout). INT64_MAX = only new input matters.
  [[nodiscard]] int64_t next_wakeup_ns() const;

  // Pops the next event; std::nullopt when none.
  std::optional<Event> poll_event();

  // Starts a graceful close (a CLOSE datagram is emitted by poll_transmit).
  void close(int64_t now_ns);

  // Re-paces reserved path `path` (one created with rate_bps > 0) at `rate_bps`, its catch-up
  // burst at most `max_burst_bytes` (0: the default, PathSpec::max_burst_bytes). For a rate
  // learned after the channel exists (a communicator knows its ranks' sites only after
  // accepting). The pacer starts afresh: at most one burst may leave at once. kInvalidArgument
  // for a best-effort path, a path out of range or a rate <= 0 (nothing changes).
  Status set_reserved_rate(uint32_t path, int64_t rate_bps, int64_t max_burst_bytes);
  // Paces path `path` through `group` as well as its own pacer (transport/pacing_group.h);
  // null leaves the group. kInvalidArgument for a path out of range.
  Status set_pacing_group(uint32_t path, std::shared_ptr<PacingGroup> group);

  [[nodiscard]] bool failed() const;
  [[nodiscard]] bool established() const;
  [[nodiscard]] size_t max_datagram_bytes() const;  // options.mtu_bytes - 28 (IPv4 + UDP)
  // Message bytes per DATA segment (all but a message's last): what the HELLO announces.
  [[nodiscard]] size_t segment_bytes() const;
  // Memory held for messages being reassembled (ChannelOptions::max_reassembly_bytes).
  [[nodiscard]] uint64_t reassembly_bytes() const;
  [[nodiscard]] ChannelStats stats() const;
  [[nodiscard]] uint64_t connection_id() const;
  // Diagnostics beyond ChannelStats: DATA dropped because it lay beyond the receive window,
  // and data segments (incl. retransmissions) sent per path (index = path).
  [[nodiscard]] uint64_t dropped_beyond_window() const;
  // The application took a delivered message of `bytes` (kMessage event): its bytes leave the
  // receive budget (ChannelOptions::max_reassembly_bytes counts delivered-but-unread messages).
  void consumed(uint64_t bytes);
  [[nodiscard]] uint64_t unread_bytes() const;
  [[nodiscard]] std::vector<uint64_t> path_segments_sent() const;

 private:
  std::unique_ptr<ConnectionImpl> impl_;
};

// The DATA payload bytes of a channel with these options and mode (every segment of a message
// but the last has exactly this many), and its receive window: what its HELLO / HELLO_ACK
// announce. options.paths must be filled (the driver's normalize_options).
[[nodiscard]] size_t segment_payload_bytes(const ChannelOptions& options, SecurityMode mode);
[[nodiscard]] int64_t receive_window_bytes(const ChannelOptions& options);

// Connection id of a datagram without validating it further (for a server demultiplexing one
// socket); std::nullopt if it is not a detwan transport datagram. DATA carries only the id's
// low 32 bits (short_form): look those up among the connections' low 32 bits.
struct PeekedId {
  uint64_t id = 0;
  bool short_form = false;
};
std::optional<PeekedId> peek_connection_id(std::span<const std::byte> datagram);
// True if the datagram is a HELLO (a client opening a new connection), of either protocol;
// `version` (if given) receives its header's version (wire::kVersion or kVersionSealed).
bool is_hello(std::span<const std::byte> datagram, uint8_t* version = nullptr);

}  // namespace detwan::transport::proto
