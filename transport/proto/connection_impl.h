#pragma once
// Private state of a proto::Connection. Split by concern over:
//   connection.cc            setup, public forwarding, events, stats, failure and close
//   connection_datapath.cc   datagram dispatch, handshake, timers, poll_transmit ordering
//   sender_datapath.cc       segmentation, ACK processing, loss detection, path choice
//   receiver_datapath.cc     reassembly, duplicate/window checks, ACK generation
//   fec_datapath.cc          FEC block encode (sender) and recovery (receiver)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transport/fec/codec.h"
#include "transport/pacing_group.h"
#include "transport/proto/cc_cubic.h"
#include "transport/proto/connection.h"
#include "transport/proto/pacer.h"
#include "transport/proto/rtt.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto {

// The receive window is enforced in segments: advertised bytes / kWindowUnitBytes. A sender
// whose segments carry more than this many payload bytes divides by its own payload size
// instead, so it never exceeds what the receiver accepts (docs/transport.md "Wire format").
inline constexpr int64_t kWindowUnitBytes = 1024;
inline constexpr int64_t kMaxWindowSegments = int64_t{1} << 30;
inline constexpr int64_t kDelayedAckNs = 1'000'000;
// In-order data is acknowledged every kAckEverySegments segments (or after kDelayedAckNs). A
// path with a reserved rate is paced, not ACK-clocked, and its ACKs share the reverse
// direction's reservation with that side's data: it acknowledges every
// kReservedAckEverySegments (a 101-byte ACK frame per 2 x 1514-byte frames is 3.3 % of the
// reverse reservation, per 16 0.4 %; the 1 ms delayed-ACK timer still bounds the wait).
inline constexpr int kAckEverySegments = 2;
inline constexpr int kReservedAckEverySegments = 16;
inline constexpr int32_t kPacerBurstDatagrams = 4;
// A path's pacer lets one wake-up send up to this many datagrams (at most 1 ms at the pacing
// rate) back to back, then waits until they have drained (Pacer's send quantum): the udp link
// sends such a run as one GSO sendmsg (at most 64 datagrams), the receiver's kernel hands it
// over as one GRO buffer, and the progress thread wakes once per run, not per datagram. On a
// reserved path the quantum is at most half the catch-up burst and taken out of it
// (reserved_quantum_datagrams), so what may leave at once is still that burst.
inline constexpr int32_t kQuantumDatagrams = 64;
// A reserved path's pacer may catch up this much sending time after its thread ran late (a
// descheduled progress thread would otherwise lose that share of the reservation for good);
// the reservation's shaper or queue absorbs a burst this small. At least kPacerBurstDatagrams,
// at most kPacerMaxBurstDatagrams.
inline constexpr int64_t kPacerCatchUpNs = 5'000'000;
inline constexpr int32_t kPacerMaxBurstDatagrams = 128;

[[nodiscard]] inline int32_t reserved_burst_datagrams(int64_t rate_bps, int64_t wire_bytes) {
  const int64_t datagrams = rate_bps * kPacerCatchUpNs / (wire_bytes * 8 * 1'000'000'000);
  return static_cast<int32_t>(
      std::clamp<int64_t>(datagrams, kPacerBurstDatagrams, kPacerMaxBurstDatagrams));
}

// The send quantum of a reserved path (see kQuantumDatagrams): the datagrams 1 ms at the rate
// carries (at least 1: none), at most kQuantumDatagrams and half of `burst`.
[[nodiscard]] inline int32_t reserved_quantum_datagrams(int64_t rate_bps, int64_t wire_bytes,
                                                        int32_t burst) {
  const int64_t in_1ms = rate_bps / 1000 / (wire_bytes * 8) + 1;
  return static_cast<int32_t>(std::min<int64_t>({in_1ms, kQuantumDatagrams, burst / 2}));
}

inline Event make_event(Event::Kind kind, uint64_t token = 0) {
  Event e;
  e.kind = kind;
  e.token = token;
  return e;
}

struct Flight {
  uint64_t seq = 0;
  uint64_t tx_index = 0;
};

struct PathState {
  PathSpec spec;
  Pacer pacer;
  std::shared_ptr<PacingGroup> group;  // shared with other channels (Channel::set_pacing_group)
  RttEstimator rtt{100'000'000, 5'000'000};
  std::optional<Cubic> cubic;     // best-effort paths only
  uint64_t tx_counter = 0;        // per-path send order of data segments
  uint64_t largest_acked_tx = 0;  // highest tx_index acknowledged on this path (0 = none)
  std::deque<Flight> flights;     // data segments in flight, in send order
  int64_t bytes_in_flight = 0;
  // Window validation (cc_cubic.h): the most in flight in the current period (one srtt) and in
  // the one before it.
  int64_t inflight_peak_bytes = 0;
  int64_t inflight_peak_prev_bytes = 0;
  int64_t inflight_period_end_ns = 0;
  int64_t last_echo_tx_ns = 0;  // newest echoed send time used for an RTT sample
  uint64_t datagrams_sent = 0;
  uint64_t data_segments_sent = 0;
  // Liveness (multipath only; check_path_alive). last_acked_ns: when a segment sent on this
  // path was last acknowledged. A dead path carries one probe segment per probe interval.
  int64_t last_acked_ns = 0;
  bool dead = false;
  int64_t next_probe_ns = 0;
};

// A path is declared dead after this much silence beyond 3 srtt (queueing and ACK delay).
inline constexpr int64_t kPathDeadSlackNs = 10'000'000;
// A dead path is probed at most this often (and at least every 2 srtt).
inline constexpr int64_t kPathProbeMinNs = 50'000'000;

struct Segment {
  uint64_t message_id = 0;
  uint64_t offset = 0;
  uint32_t len = 0;
  uint32_t wire_bytes = 0;
  uint32_t path = 0;
  uint16_t retransmits = 0;
  bool sacked = false;
  bool in_flight = false;
  bool queued_lost = false;
  int64_t sent_ns = 0;
  uint64_t tx_index = 0;
  int64_t fec_guard_ns = 0;  // not declared lost by reordering before this (parity may rescue)
};

struct OutMessage {
  std::span<const std::byte> bytes;
  uint64_t token = 0;
  uint64_t id = 0;
  uint64_t next_offset = 0;
  uint64_t first_seq = 0;  // seq of its first segment (its segments' seqs are consecutive)
  uint64_t last_seq = 0;
  uint32_t last_index = 0;  // segments - 1
  bool segmented = false;
};

// A message being reassembled, keyed by the seq of its first segment. Segment `index` holds
// bytes [index * peer segment size, + its length); each seq arrives once (duplicates are
// dropped by seq), so received_segments == last_index + 1 means every byte is present.
// Memory as data arrives, never as announced: the buffer's capacity starts at
// min(announced, kReassemblyReserveBytes) (or a recycled buffer's) and grows kReassemblyGrowth
// times at a time (to the announced bound at once when that step would reach half of it) when
// a segment lands beyond it. That capacity is address space the budgets count; the memory
// touched is the buffer's size, which covers the highest byte placed so far rounded up by at
// most kReassemblyFillBytes (zero-filled in steps that large, one memset instead of one per
// segment). Why 64 MiB: a 64 MiB message that started at 4 MiB and grew cost its receiver
// ~30 % more CPU than one allocated at once (the reallocation's faults and unmapping, measured
// on the veth pair; docs/benchmarks/transport.md), while an announcement's first 64 MiB of address
// space stay untouched until data arrives.
inline constexpr uint64_t kReassemblyReserveBytes = uint64_t{64} << 20;
inline constexpr uint64_t kReassemblyGrowth = 8;
inline constexpr uint64_t kReassemblyFillBytes = uint64_t{1} << 20;
struct InMessage {
  std::vector<std::byte> bytes;
  uint64_t bound = 0;    // the most it may hold: exact once size_known
  uint64_t charged = 0;  // capacity counted in reassembly_bytes_ and the budgets
  uint32_t last_index = 0;
  uint32_t received_segments = 0;
  bool size_known = false;  // the last segment arrived: bytes.size() is the message's
  bool complete = false;
};

struct FecTxBlock {
  uint64_t first_seq = 0;
  int count = 0;
  size_t max_len = 0;
  std::vector<std::byte> symbols;  // k * symbol_capacity, zero padded
};

struct ParityOut {
  uint64_t first_seq = 0;
  uint8_t k = 0;
  uint8_t m = 0;
  uint8_t index = 0;
  std::vector<std::byte> symbol;
};

struct FecRxBlock {
  uint64_t first_seq = 0;
  int k = 0;
  int m = 0;
  size_t symbol_bytes = 0;
  std::vector<std::byte> parity;  // m * symbol_bytes
  std::vector<bool> parity_present;
  bool done = false;
};

class ConnectionImpl {
 public:
  ConnectionImpl(const ConnectionConfig& config, int64_t now_ns);

  // connection.cc
  Status queue_message(std::span<const std::byte> message, uint64_t token);
  std::optional<Event> poll_event();
  void close(int64_t now_ns);
  Status set_reserved_rate(uint32_t path, int64_t rate_bps, int64_t max_burst_bytes);
  Status set_pacing_group(uint32_t path, std::shared_ptr<PacingGroup> group);
  // When path `path` may send data: its own pacer and its group's, whichever is later.
  [[nodiscard]] int64_t path_release_ns(uint32_t path, int64_t now_ns) const;
  [[nodiscard]] Pacer reserved_pacer(const PathSpec& spec) const;
  void fail(ErrorCode code, std::string message);
  [[nodiscard]] ChannelStats stats() const;
  [[nodiscard]] bool failed() const { return failed_; }
  [[nodiscard]] bool established() const { return established_; }
  [[nodiscard]] size_t max_datagram_bytes() const { return max_datagram_bytes_; }
  [[nodiscard]] size_t segment_bytes() const { return payload_bytes_; }
  [[nodiscard]] uint64_t reassembly_bytes() const { return reassembly_bytes_; }
  [[nodiscard]] uint64_t connection_id() const { return connection_id_; }
  [[nodiscard]] uint64_t dropped_beyond_window() const { return dropped_window_; }
  void consumed(uint64_t bytes) {
    unread_bytes_ -= std::min(bytes, unread_bytes_);
    settle_budget();
  }
  ~ConnectionImpl();
  [[nodiscard]] uint64_t unread_bytes() const { return unread_bytes_; }
  [[nodiscard]] std::vector<uint64_t> path_datagrams_sent() const;

  // connection_datapath.cc
  Status on_datagram(uint32_t path, std::span<const std::byte> datagram, int64_t now_ns);
  Transmit poll_transmit(int64_t now_ns, std::span<std::byte> out);
  // The bodies of a decoded datagram (views into it, or into rx_plain_).
  struct Parsed {
    wire::HelloBody hello;
    wire::DataBody data;
    wire::AckBody ack;
    wire::FecBody fec;
    wire::CloseBody close;
  };
  [[nodiscard]] int64_t next_wakeup_ns() const;

 private:
  friend class Connection;
  void advance_timers(int64_t now_ns);
  void note_peer_alive(int64_t now_ns) { last_peer_rx_ns_ = now_ns; }
  [[nodiscard]] wire::Header header(wire::Type type, uint32_t path, int64_t now_ns) const;
  void charge(uint32_t path, size_t bytes, int64_t now_ns);          // DATA, FEC: paced
  void charge_control(uint32_t path, size_t bytes, int64_t now_ns);  // never paced
  void release_buffers();
  void on_established();
  // The body of a datagram of type h.type; kMalformed if it does not parse.
  Status parse_body(const wire::Header& h, std::span<const std::byte> body, Parsed& p);
  // What a valid datagram of this connection does (after CRC or tag, id and replay checks).
  Status apply(uint32_t path, const wire::Header& h, Parsed& p, int64_t now_ns);
  // Authenticated channels (connection_security.cc).
  void setup_security(const ConnectionConfig& config);
  Status on_sealed_datagram(uint32_t path, const wire::Header& h, std::span<const std::byte> d,
                            int64_t now_ns);
  Status on_sealed_hello(uint32_t path, const wire::Header& h, std::span<const std::byte> d,
                         int64_t now_ns);
  size_t build_sealed_hello(int64_t now_ns, uint32_t path, std::span<std::byte> out);
  // Appends the tag to the `size` plaintext bytes in `out`; returns the sealed size, 0 if
  // sealing failed (the connection fails).
  size_t seal_datagram(std::span<std::byte> out, size_t size);
  Transmit build_transmit(int64_t now_ns, std::span<std::byte> out);  // plaintext

  // sender_datapath.cc
  Status on_ack(uint32_t path, const wire::Header& h, const wire::AckBody& ack, int64_t now_ns);
  void on_segment_acked(Segment& seg, int64_t now_ns);
  // Window validation: the path had at least half its window in flight in this srtt period or
  // the one before (rolls the period).
  bool cwnd_in_use(PathState& p, int64_t now_ns);
  void mark_lost(uint64_t seq, Segment& seg, int64_t now_ns);
  void detect_losses(uint32_t path, int64_t now_ns);
  void check_rto(uint32_t path, int64_t now_ns);
  Segment* front_flight(uint32_t path, Flight* flight);
  // Declares the path dead (its in-flight segments lost, resent on the others) when it has been
  // silent for path_dead_after_ns while another path's data was acknowledged; on a dead path,
  // a probe older than that is declared lost.
  void check_path_alive(uint32_t path, int64_t now_ns);
  [[nodiscard]] int64_t path_dead_after_ns(const PathState& p) const;
  [[nodiscard]] bool path_usable(uint32_t path, int64_t now_ns) const;
  void complete_messages();
  [[nodiscard]] bool has_new_data() const;
  [[nodiscard]] bool window_allows_new() const;
  [[nodiscard]] bool cwnd_allows(uint32_t path) const;
  [[nodiscard]] std::optional<uint32_t> pick_path(int64_t now_ns, std::optional<uint32_t> avoid,
                                                  int64_t* release_ns) const;
  size_t send_data(int64_t now_ns, std::span<std::byte> out, uint32_t* path);
  size_t transmit_segment(uint64_t seq, uint32_t path, int64_t now_ns, std::span<std::byte> out);
  Segment* segment(uint64_t seq);
  [[nodiscard]] int64_t sender_timer_ns() const;
  [[nodiscard]] int64_t data_release_ns(int64_t now_ns) const;
  void update_pacing(uint32_t path);

  // receiver_datapath.cc
  // The 64-bit seq nearest the cumulative ACK point with these low 32 bits (nullopt: below 0).
  [[nodiscard]] std::optional<uint64_t> expand_seq(uint64_t wire_seq) const;
  Status on_data(uint32_t path, const wire::Header& h, const wire::DataBody& d, int64_t now_ns,
                 bool recovered);
  [[nodiscard]] bool seq_received(uint64_t seq) const;
  void mark_received(uint64_t seq);
  void deliver_ready();
  size_t build_ack(int64_t now_ns, std::span<std::byte> out);  // an ACK datagram
  void fill_ack(int64_t now_ns, wire::AckBody& a) const;       // what an ACK says now
  void ack_sent();                                             // no ACK owed any more
  [[nodiscard]] bool ack_owed() const { return ack_now_ || ack_deadline_ns_ != INT64_MAX; }
  [[nodiscard]] uint64_t recv_window_segments() const;
  // Grows `m` to hold `end` bytes (capacity within its bound, taken from the budgets first);
  // false if a budget refuses (the segment is dropped, counted dropped_memory).
  bool reserve_reassembly(InMessage& m, uint64_t end, bool next_to_deliver);
  // Gives the endpoint budget back what this connection no longer holds.
  void settle_budget();

  // fec_datapath.cc
  void fec_on_new_segment(uint64_t seq, const wire::DataBody& body, int64_t now_ns);
  void fec_close_block(int64_t now_ns);
  size_t fec_send_parity(int64_t now_ns, std::span<std::byte> out, uint32_t* path);
  void fec_alloc_rx();
  void fec_store_rx_symbol(uint64_t seq, const wire::DataBody& body);
  Status on_fec(uint32_t path, const wire::Header& h, const wire::FecBody& f, int64_t now_ns);
  void fec_try_recover(FecRxBlock& block, uint32_t path, const wire::Header& h, int64_t now_ns);
  [[nodiscard]] size_t fec_symbol_capacity() const;

  // Security (connection_security.cc). tag_bytes_: 16 on an authenticated channel, else 0.
  SecurityMode mode_ = SecurityMode::kNone;
  Keyring* keyring_ = nullptr;
  size_t tag_bytes_ = 0;
  crypto::Nonce own_nonce_{};   // client: the nonce of its HELLO
  crypto::Nonce peer_nonce_{};  // client: the server's, from the HELLO_ACK
  std::optional<crypto::PacketCipher> tx_cipher_;
  std::optional<crypto::PacketCipher> rx_cipher_;
  uint64_t tx_packet_number_ = 0;
  ReplayWindow rx_window_;
  std::vector<std::byte> rx_plain_;  // kEncrypt: a datagram's decrypted body
  bool confirm_pending_ = false;     // client: prove the keys to the server at once
  bool tx_unsealed_ = false;         // the datagram being built carries its own MAC (HELLO)
  bool peer_runs_plain_ = false;     // client: a plain CLOSE said "security mismatch"

  // Configuration.
  Role role_;
  uint64_t connection_id_;
  ChannelOptions options_;
  BufferPool* rx_pool_ = nullptr;  // ConnectionConfig::rx_pool
  size_t max_datagram_bytes_;
  size_t payload_bytes_;  // message bytes per DATA segment (all but a message's last)
  int64_t recv_window_bytes_;

  // Connection state.
  bool established_ = false;
  bool failed_ = false;
  bool closed_ = false;  // locally closed or peer closed
  bool close_pending_ = false;
  bool hello_ack_pending_ = false;
  int64_t hello_next_ns_ = 0;
  int hello_attempts_ = 0;
  int64_t created_ns_;
  int64_t last_peer_rx_ns_;
  int64_t last_tx_ns_;
  uint64_t peer_window_bytes_;
  uint32_t peer_segment_bytes_ = 0;  // the peer's payload_bytes_ (its HELLO / HELLO_ACK); 0 unknown
  std::deque<Event> events_;
  std::vector<PathState> paths_;
  uint32_t keepalive_path_ = 0;

  // Sender.
  std::deque<OutMessage> out_messages_;  // front = oldest not yet complete
  size_t segmenting_index_ = 0;          // index into out_messages_ of the next to segment
  uint64_t next_message_id_ = 0;
  std::deque<Segment> segments_;     // seq seg_base_ + i
  uint64_t seg_base_ = 0;            // lowest seq not cumulatively acknowledged
  std::deque<uint64_t> lost_queue_;  // retransmissions go first
  fec::LossEstimator loss_estimator_;
  uint64_t window_sent_ = 0;  // loss estimator window
  uint64_t window_lost_ = 0;

  // Receiver.
  uint64_t rcv_cum_ = 0;                     // next expected seq
  std::map<uint64_t, uint64_t> rcv_ranges_;  // [start, end) received above rcv_cum_
  uint64_t last_rcv_seq_ = 0;
  std::map<uint64_t, InMessage> in_messages_;
  uint64_t reassembly_bytes_ = 0;  // sum of in_messages_' charged capacities
  MemoryBudget* endpoint_budget_ = nullptr;
  uint64_t budget_charged_ = 0;    // taken from endpoint_budget_: reassembly + unread
  uint64_t unread_bytes_ = 0;      // delivered messages the application has not taken yet
  uint64_t next_deliver_seq_ = 0;  // first seq of the next message to deliver
  int pending_ack_segments_ = 0;
  bool ack_now_ = false;
  bool ack_ride_tried_ = false;  // a DATA was offered the ACK owed now (poll_transmit)
  int64_t ack_deadline_ns_ = INT64_MAX;
  uint32_t ack_path_ = 0;
  uint32_t ack_echo_tx_us_ = 0;
  int64_t ack_echo_rx_ns_ = 0;

  // FEC.
  fec::RsCodec codec_;
  fec::AdaptivePolicy fec_policy_;
  int fec_m_current_ = 0;
  FecTxBlock fec_tx_;
  std::deque<ParityOut> parity_queue_;
  std::vector<std::byte> fec_rx_ring_;     // recent data symbols, slot = seq % ring slots
  std::vector<uint64_t> fec_rx_ring_seq_;  // seq + 1 stored in each slot (0 = empty)
  std::vector<uint32_t> fec_rx_ring_len_;
  std::deque<FecRxBlock> fec_rx_blocks_;

  // Stats.
  ChannelStats stats_;
  uint64_t dropped_window_ = 0;
};

}  // namespace detwan::transport::proto
