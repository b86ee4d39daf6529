#include "tools/perf/server_session.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <poll.h>

#include "tools/perf/control.h"
#include "tools/perf/metrics.h"
#include "tools/perf/perf_wire.h"
#include "tools/perf/session_io.h"
#include "tools/probe/udp_socket.h"

namespace detwan::perf {
namespace json = boost::json;

namespace {

constexpr int64_t kDefaultLingerNs = 500'000'000;
constexpr int64_t kMaxLingerNs = 10 * kNsPerSec;
constexpr size_t kRecordsPerLine = 10'000;  // ~40 bytes each: lines stay far below 1 MiB

class ServerSession {
 public:
  ServerSession(common::UniqueFd fd, uint32_t id, const ServerOptions& options,
                const std::atomic<bool>& stop, const SessionCounters& counters)
      : control_(std::move(fd)), id_(id), options_(options), stop_(stop), counters_(counters) {}
  ~ServerSession() { stop_sender(); }

  SessionEnd run();

 private:
  SessionEnd negotiate();
  SessionEnd loop();
  void drain_udp();
  void on_datagram(const DatagramReader& r, int i);
  void on_hello(const DatagramReader& r, int i, const Packet& p);
  void refuse_hello(HelloRefusal why, const sockaddr_storage& from);
  // Returns an end reason when the message ends the session.
  std::optional<SessionEnd> on_message(const json::object& m);
  void read_clock(const json::object& m);
  bool start_reverse_sender();
  void stop_sender();
  void send_result();
  SessionEnd reject(SessionEnd why, const std::string& message);
  void malformed() {
    if (receiver_) receiver_->on_malformed();
    if (counters_.malformed_packets != nullptr) ++*counters_.malformed_packets;
  }
  void log(const std::string& text) const {
    if (options_.verbose) fmt::print(stderr, "detwan-perf server: session {}: {}\n", id_, text);
  }

  ControlChannel control_;
  uint32_t id_;
  const ServerOptions& options_;
  const std::atomic<bool>& stop_;
  SessionCounters counters_;

  TestSpec spec_;
  uint64_t max_packets_ = 0;
  int64_t linger_ns_ = kDefaultLingerNs;
  std::optional<probe::UdpSocket> udp_;
  std::optional<DatagramReader> reader_;
  std::optional<StreamReceiver> receiver_;
  std::vector<PacketRecord> packets_;
  bool packets_truncated_ = false;

  // Who may get packets: only the control connection's peer (its IP), at the UDP port its
  // hello came from, and only a hello that carries token_ (handed out on the control
  // connection) counts. A spoofed hello moves nothing (docs/perf.md, "Who gets packets").
  probe::SocketAddress control_peer_;
  HelloToken token_;
  sockaddr_storage client_{};
  socklen_t client_length_ = 0;
  bool have_client_ = false;
  std::array<bool, kHelloRefusals> refusal_logged_{};

  int64_t correction_ns_ = 0;
  bool started_ = false, done_ = false;
  int64_t start_ns_ = 0, end_ns_ = 0;  // forward span, client clock
  int64_t last_heard_ns_ = 0;          // monotonic
  int64_t next_interval_ns_ = INT64_MAX;
  int64_t linger_deadline_ns_ = INT64_MAX;

  std::thread sender_;
  std::atomic<bool> sender_stop_{false}, sender_done_{false};
  StreamSender reverse_sender_;
  StreamTarget reverse_target_;
  SendOutcome reverse_outcome_;
};

SessionEnd ServerSession::reject(SessionEnd why, const std::string& message) {
  log("rejected: " + message);
  (void)control_.send(json::object{{"type", "error"}, {"message", message}}, kNsPerSec);
  return why;
}

SessionEnd ServerSession::negotiate() {
  auto hello = control_.receive(options_.peer_timeout_ns);
  if (!hello) {
    if (hello.error().code == common::ErrorCode::kInvalidArgument) {
      return reject(SessionEnd::kMalformedControl, hello.error().message);
    }
    return SessionEnd::kVanished;
  }
  auto type = get_string(*hello, "type");
  if (!type || *type != "hello") {
    return reject(SessionEnd::kMalformedControl, "expected a hello message first");
  }
  auto version = get_int(*hello, "version");
  if (!version || *version != kProtocolVersion) {
    return reject(SessionEnd::kRejected,
                  fmt::format("version: this server speaks version {}", kProtocolVersion));
  }
  const json::value* spec_json = hello->if_contains("spec");
  if (spec_json == nullptr) return reject(SessionEnd::kRejected, "spec: missing");
  auto spec = spec_from_json(*spec_json);
  if (!spec) return reject(SessionEnd::kRejected, spec.error().message);
  if (auto valid = validate_spec(*spec); !valid) {
    return reject(SessionEnd::kRejected, valid.error().message);
  }
  if (auto within = check_server_limits(*spec, options_.limits); !within) {
    return reject(SessionEnd::kOverLimits, within.error().message);
  }
  spec_ = *spec;
  auto peer = peer_address(control_.fd());
  if (!peer) return reject(SessionEnd::kFailed, "server: " + peer.error().message);
  control_peer_ = *peer;
  auto token = new_hello_token();
  if (!token) return reject(SessionEnd::kFailed, "server: " + token.error().message);
  token_ = *token;
  if (auto linger = get_int(*hello, "linger_ns"); linger) {
    linger_ns_ = std::clamp<int64_t>(*linger, 0, kMaxLingerNs);
  }
  max_packets_ = max_packets_for(spec_);

  // The test socket sits on the address the client reached us on, so the path under test is
  // the one the client named (matters with --compare and on multi-homed hosts).
  auto local = local_address(control_.fd());
  if (!local) return reject(SessionEnd::kFailed, "server: " + local.error().message);
  if (local->storage.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&local->storage)->sin_port = 0;
  } else {
    reinterpret_cast<sockaddr_in6*>(&local->storage)->sin6_port = 0;
  }
  uint16_t udp_port = 0;
  try {
    udp_.emplace(local->storage.ss_family);
    udp_->set_receive_buffer(kReceiveBufferBytes);
    udp_->enable_timestamps();
    if (spec_.dscp >= 0) udp_->set_dscp(spec_.dscp, local->storage.ss_family);
    udp_->bind_to(*local);
    auto bound = local_address(udp_->fd());
    if (!bound) throw common::Failure(bound.error());
    udp_port = ntohs(bound->storage.ss_family == AF_INET
                         ? reinterpret_cast<const sockaddr_in*>(&bound->storage)->sin_port
                         : reinterpret_cast<const sockaddr_in6*>(&bound->storage)->sin6_port);
  } catch (const common::Failure& e) {
    return reject(SessionEnd::kFailed, "server: " + e.error().message);
  }
  reader_.emplace(kReceiveBatch, std::max<size_t>(spec_.size_bytes, 512));
  receiver_.emplace(max_packets_, spec_.bound_ns);
  if (spec_.want_packets && sends_forward(spec_)) {
    packets_.reserve(std::min<uint64_t>(max_packets_, kMaxPacketRecords));
  }
  if (counters_.last_udp_port != nullptr) counters_.last_udp_port->store(udp_port);
  if (auto sent = control_.send(json::object{{"type", "accept"},
                                             {"session", id_},
                                             {"udp_port", udp_port},
                                             {"token", format_token(token_)}});
      !sent) {
    return SessionEnd::kVanished;
  }
  log(fmt::format("accepted {} {} from {}, udp port {}", to_string(spec_.mode),
                  to_string(spec_.direction), format_address(control_peer_), udp_port));
  return SessionEnd::kServed;
}

void ServerSession::refuse_hello(HelloRefusal why, const sockaddr_storage& from) {
  const auto index = static_cast<size_t>(why);
  if (counters_.refused_hellos != nullptr) ++counters_.refused_hellos[index];
  // One line per reason and session: a flood of forged hellos does not flood the log.
  if (!refusal_logged_[index]) {
    refusal_logged_[index] = true;
    log(fmt::format("refused a UDP hello from {} ({}; the control connection is from {}); "
                    "further ones are only counted",
                    format_ip(from), to_string(why), format_ip(control_peer_.storage)));
  }
}

void ServerSession::on_hello(const DatagramReader& r, int i, const Packet& p) {
  const sockaddr_storage& from = r.from(i);
  if (p.session != id_) return refuse_hello(HelloRefusal::kSession, from);
  if (!tokens_equal(hello_token_of(p), token_)) return refuse_hello(HelloRefusal::kToken, from);
  if (!same_ip(from, control_peer_.storage)) return refuse_hello(HelloRefusal::kSource, from);
  // Before the test the latest hello wins (NAT rebinding of the port); once started the
  // reverse sender reads the address, so it stays fixed.
  if (!started_) {
    client_ = from;
    client_length_ = r.from_length(i);
    have_client_ = true;
  } else if (!same_address(from, r.from_length(i), client_, client_length_)) {
    return refuse_hello(HelloRefusal::kLate, from);
  }
  last_heard_ns_ = monotonic_ns();
  (void)send_packet(udp_->fd(), &client_, client_length_,
                    Packet{Kind::kHelloAck, id_, p.seq, p.t_a, 0, 0}, kHeaderBytes);
}

void ServerSession::on_datagram(const DatagramReader& r, int i) {
  Packet p;
  if (r.truncated(i) || decode(r.data(i), r.size(i), &p) != DecodeResult::kOk) {
    malformed();
    return;
  }
  if (p.kind == Kind::kHello) return on_hello(r, i, p);
  if (p.session != id_) {
    malformed();
    return;
  }
  // Everything else counts only from the address a valid hello established.
  const bool from_client =
      have_client_ && same_address(r.from(i), r.from_length(i), client_, client_length_);
  switch (p.kind) {
    case Kind::kSyncRequest: {
      if (!from_client) break;
      last_heard_ns_ = monotonic_ns();
      // Ping-pong replies match the request's size so both legs carry the same bytes.
      const size_t size = spec_.mode == Mode::kPingPong ? r.size(i) : kHeaderBytes;
      (void)send_packet(udp_->fd(), &client_, client_length_,
                        Packet{Kind::kSyncReply, id_, p.seq, p.t_a, r.rx_ns(i), realtime_ns()},
                        size);
      return;
    }
    case Kind::kData: {
      if (!from_client) break;
      last_heard_ns_ = monotonic_ns();
      const auto verdict = receiver_->on_packet(p.seq, p.t_a, r.rx_ns(i),
                                                static_cast<uint32_t>(r.size(i)), correction_ns_);
      if (verdict == StreamReceiver::Verdict::kOutOfRange) {
        if (counters_.malformed_packets != nullptr) ++*counters_.malformed_packets;
      } else if (verdict == StreamReceiver::Verdict::kNew && spec_.want_packets) {
        if (packets_.size() < kMaxPacketRecords) {
          packets_.push_back(PacketRecord{p.seq, p.t_a, r.rx_ns(i)});  // reserved at setup
        } else {
          packets_truncated_ = true;
        }
      }
      return;
    }
    case Kind::kFin: {
      if (!from_client) break;
      last_heard_ns_ = monotonic_ns();
      if (p.t_b >= 0 && static_cast<uint64_t>(p.t_b) <= max_packets_) {
        receiver_->set_sent(static_cast<uint64_t>(p.t_b));
      }
      return;
    }
    default:
      break;
  }
  malformed();
}

void ServerSession::drain_udp() {
  for (int batch = 0; batch < kMaxBatchesPerWake; ++batch) {
    const int n = reader_->receive(udp_->fd());
    for (int i = 0; i < n; ++i) on_datagram(*reader_, i);
    if (n < static_cast<int>(kReceiveBatch)) return;
  }
}

void ServerSession::read_clock(const json::object& m) {
  if (auto c = get_int(m, "correction_ns"); c) correction_ns_ = *c;
}

bool ServerSession::start_reverse_sender() {
  if (!have_client_) return false;
  reverse_target_ =
      StreamTarget{udp_->fd(), &client_, client_length_, id_, &reverse_sender_, nullptr};
  const int64_t start_ns = realtime_ns() + 10'000'000;  // lead time: the client is polling
  sender_ = std::thread([this, start_ns] {
    reverse_outcome_ = run_stream_sender(
        spec_, max_packets_, start_ns, std::span<StreamTarget>(&reverse_target_, 1), sender_stop_);
    sender_done_.store(true, std::memory_order_release);
  });
  return true;
}

void ServerSession::stop_sender() {
  sender_stop_.store(true);
  if (sender_.joinable()) sender_.join();
}

std::optional<SessionEnd> ServerSession::on_message(const json::object& m) {
  auto type = get_string(m, "type");
  if (!type) return reject(SessionEnd::kMalformedControl, "control message without a type");
  if (*type == "start" && !started_) {
    started_ = true;
    read_clock(m);
    auto start = get_int(m, "start_ns");
    start_ns_ = start ? *start : realtime_ns();
    if (spec_.interval_ns > 0) next_interval_ns_ = monotonic_ns() + spec_.interval_ns;
    if (sends_reverse(spec_) && !start_reverse_sender()) {
      return reject(SessionEnd::kRejected, "start: no UDP hello arrived from the client");
    }
  } else if (*type == "clock") {
    read_clock(m);
  } else if (*type == "done" && !done_) {
    done_ = true;
    read_clock(m);
    if (auto sent = get_int(m, "sent");
        sent && *sent >= 0 && static_cast<uint64_t>(*sent) <= max_packets_) {
      receiver_->set_sent(static_cast<uint64_t>(*sent));
    }
    auto end = get_int(m, "end_ns");
    end_ns_ = end ? *end : realtime_ns();
  }
  // Unknown types are ignored: a newer client may send more.
  return std::nullopt;
}

void ServerSession::send_result() {
  json::object result{{"type", "result"}};
  if (sends_forward(spec_)) {
    const DirectionResult forward =
        receiver_->result(correction_ns_, start_ns_, std::max(end_ns_, start_ns_));
    result["forward"] = direction_to_json(forward);
  }
  if (sends_reverse(spec_)) {
    DirectionResult rs;
    rs.sent = reverse_outcome_.sent;
    rs.start_ns = reverse_outcome_.first_tx_ns;
    rs.end_ns = reverse_outcome_.last_tx_ns;
    rs.schedule_error_ns = summarize(reverse_sender_.schedule_error());
    result["reverse_sender"] = direction_to_json(rs);
  }
  if (spec_.want_packets) {
    // Records go in chunks before the result so no line comes near the 1 MiB limit.
    for (size_t begin = 0; begin < packets_.size(); begin += kRecordsPerLine) {
      json::array records;
      const size_t end = std::min(packets_.size(), begin + kRecordsPerLine);
      records.reserve(end - begin);
      for (size_t k = begin; k < end; ++k) {
        records.push_back(json::array{packets_[k].seq, packets_[k].tx_ns, packets_[k].rx_ns});
      }
      if (!control_.send(json::object{{"type", "packets"}, {"records", std::move(records)}})) {
        return;
      }
    }
    result["packets_truncated"] = packets_truncated_;
  }
  (void)control_.send(result);
}

SessionEnd ServerSession::loop() {
  last_heard_ns_ = monotonic_ns();
  for (;;) {
    if (stop_.load(std::memory_order_relaxed)) return SessionEnd::kStopped;
    const int64_t now = monotonic_ns();
    if (now - last_heard_ns_ > options_.peer_timeout_ns) {
      log(fmt::format("client vanished: no message for {:.1f} s", (now - last_heard_ns_) / 1e9));
      return SessionEnd::kVanished;
    }
    if (done_ && linger_deadline_ns_ == INT64_MAX &&
        (!sender_.joinable() || sender_done_.load(std::memory_order_acquire))) {
      // Wait for stragglers at least as long as the slowest packet seen took.
      int64_t linger = linger_ns_;
      if (sends_forward(spec_)) {
        linger = std::max(linger, receiver_->result(correction_ns_, start_ns_, end_ns_).owd_ns.max);
      }
      linger_deadline_ns_ = now + std::min(linger, kMaxLingerNs);
    }
    if (now >= linger_deadline_ns_) {
      stop_sender();
      send_result();
      log("served");
      return SessionEnd::kServed;
    }
    if (started_ && !done_ && now >= next_interval_ns_ && sends_forward(spec_)) {
      const DirectionResult interval = receiver_->take_interval(correction_ns_, realtime_ns());
      if (!control_.send(json::object{{"type", "interval"},
                                      {"direction", "forward"},
                                      {"result", direction_to_json(interval)}})) {
        return SessionEnd::kVanished;
      }
      next_interval_ns_ += spec_.interval_ns;
    }
    const int64_t wake = std::min({now + 100'000'000, next_interval_ns_, linger_deadline_ns_});
    pollfd fds[2] = {{control_.fd(), POLLIN, 0}, {udp_->fd(), POLLIN, 0}};
    const int timeout_ms = static_cast<int>(std::clamp<int64_t>((wake - now) / 1'000'000, 0, 100));
    if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) return SessionEnd::kFailed;
    if ((fds[1].revents & POLLIN) != 0) drain_udp();
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      auto read = control_.read_available();
      while (auto m = control_.next()) {
        last_heard_ns_ = monotonic_ns();
        if (auto end = on_message(*m)) return *end;
      }
      if (!read) {
        if (read.error().code == common::ErrorCode::kInvalidArgument) {
          return reject(SessionEnd::kMalformedControl, read.error().message);
        }
        log("client " + read.error().message);
        return SessionEnd::kVanished;
      }
    }
  }
}

SessionEnd ServerSession::run() {
  const SessionEnd negotiated = negotiate();
  if (negotiated != SessionEnd::kServed) return negotiated;
  const SessionEnd end = loop();
  stop_sender();
  return end;
}

}  // namespace

const char* to_string(HelloRefusal why) noexcept {
  switch (why) {
    case HelloRefusal::kSession:
      return "another session's id";
    case HelloRefusal::kToken:
      return "without this session's token";
    case HelloRefusal::kSource:
      return "not the control connection's address";
    case HelloRefusal::kLate:
      return "another port after the start";
  }
  return "?";
}

SessionEnd run_server_session(common::UniqueFd control_fd, uint32_t session_id,
                              const ServerOptions& options, const std::atomic<bool>& stop,
                              const SessionCounters& counters) {
  ServerSession session(std::move(control_fd), session_id, options, stop, counters);
  return session.run();
}

}  // namespace detwan::perf
