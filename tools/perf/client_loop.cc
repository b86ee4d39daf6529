// The client's per-path loop: from the start message to the server's result. One thread per
// path; it owns the path's UDP receive side (reverse stream, sync replies, ping-pong) and its
// control connection. The forward sender runs on its own thread (session_client.cc).
#include <algorithm>
#include <array>
#include <cerrno>

#include <fmt/format.h>
#include <poll.h>

#include "tools/perf/client_path.h"
#include "tools/perf/perf_wire.h"

namespace detwan::perf {
namespace json = boost::json;

namespace {

constexpr int64_t kSyncSpacingNs = 100'000'000;    // 10 exchanges per second during the test
constexpr int64_t kPingTimeoutNs = kNsPerSec;      // ping-pong: a reply later than this is lost
constexpr int64_t kReverseFinGraceNs = kNsPerSec;  // after the test: wait for the reverse fin
constexpr int64_t kClockEveryNs = kNsPerSec;       // clock updates when there are no intervals
constexpr size_t kSyncRing = 64;

// Ping-pong runs as fast as the round trip allows: track up to one ping per microsecond.
uint64_t max_pings(const TestSpec& spec) {
  return std::min<uint64_t>(kMaxPacketsPerDirection,
                            static_cast<uint64_t>(spec.duration_ns / 1000) + 1000);
}

class PathRunner {
 public:
  PathRunner(ClientPath& path, ClientContext& context)
      : path_(path),
        context_(context),
        options_(context.options),
        spec_(context.options.spec),
        reader_(kReceiveBatch, std::max<size_t>(spec_.size_bytes, 512)) {
    if (spec_.mode == Mode::kPingPong) {
      path_.ping_forward.emplace(max_pings(spec_), spec_.bound_ns);
      path_.ping_reverse.emplace(max_pings(spec_), spec_.bound_ns);
      ping_base_ = path_.next_sync_seq;
    } else if (sends_reverse(spec_)) {
      path_.reverse.emplace(max_packets_for(spec_), spec_.bound_ns);
      if (spec_.want_packets) {
        path_.report.reverse_packets.reserve(
            std::min<uint64_t>(max_packets_for(spec_), kMaxPacketRecords));
      }
    }
  }

  void run();

 private:
  [[nodiscard]] int64_t correction() const { return path_.clock.correction_ns(options_.clock); }
  [[nodiscard]] bool stopped() const {
    return context_.stop != nullptr && context_.stop->load(std::memory_order_relaxed);
  }
  void fail(std::string error) {
    path_.report.error = std::move(error);
    path_.alive.store(false);
  }
  void emit(const char* direction, const DirectionResult& r) {
    if (!context_.sink) return;
    std::lock_guard lock(context_.sink_mutex);
    context_.sink(path_.target, direction, r);
  }
  void drain_udp(int64_t now);
  void on_datagram(int i, int64_t now);
  bool on_message(const json::object& m);  // false: the path ends (error set)
  void send_sync(int64_t now);
  void ping(int64_t now);
  void take_intervals();
  bool ready_for_done(int64_t now) const;

  ClientPath& path_;
  ClientContext& context_;
  const ClientOptions& options_;
  const TestSpec& spec_;
  DatagramReader reader_;
  bool reverse_fin_seen_ = false;
  bool result_received_ = false;
  int64_t last_heard_ns_ = 0;  // monotonic
  int64_t test_end_ns_ = 0;    // monotonic end of the schedule

  std::array<uint64_t, kSyncRing> sync_seq_{};
  std::array<int64_t, kSyncRing> sync_t1_{};

  uint64_t ping_base_ = 0;
  bool ping_outstanding_ = false;
  int64_t ping_t1_ = 0, ping_deadline_ns_ = 0;
};

void PathRunner::send_sync(int64_t /*now*/) {
  const uint64_t seq = path_.next_sync_seq++;
  const int64_t t1 = realtime_ns();
  sync_seq_[seq % kSyncRing] = seq;
  sync_t1_[seq % kSyncRing] = t1;
  (void)send_packet(path_.udp->fd(), nullptr, 0,
                    Packet{Kind::kSyncRequest, path_.session, seq, t1, 0, 0}, kHeaderBytes);
}

void PathRunner::ping(int64_t now) {
  ping_t1_ = realtime_ns();
  (void)send_packet(
      path_.udp->fd(), nullptr, 0,
      Packet{Kind::kSyncRequest, path_.session, ping_base_ + path_.pings_sent, ping_t1_, 0, 0},
      spec_.size_bytes);
  ++path_.pings_sent;
  ping_outstanding_ = true;
  ping_deadline_ns_ = now + kPingTimeoutNs;
}

void PathRunner::on_datagram(int i, int64_t now) {
  Packet p;
  const uint8_t* data = reader_.data(i);
  if (reader_.truncated(i) || decode(data, reader_.size(i), &p) != DecodeResult::kOk ||
      p.session != path_.session) {
    if (path_.reverse) path_.reverse->on_malformed();
    return;
  }
  const int64_t rx = reader_.rx_ns(i);
  switch (p.kind) {
    case Kind::kData:
      if (!path_.reverse) break;
      last_heard_ns_ = now;
      if (path_.reverse->on_packet(p.seq, p.t_a, rx, static_cast<uint32_t>(reader_.size(i)),
                                   -correction()) == StreamReceiver::Verdict::kNew &&
          spec_.want_packets && path_.report.reverse_packets.size() < kMaxPacketRecords) {
        path_.report.reverse_packets.push_back(PacketRecord{p.seq, p.t_a, rx});  // reserved
      }
      return;
    case Kind::kFin:
      if (!path_.reverse) break;
      last_heard_ns_ = now;
      reverse_fin_seen_ = true;
      if (p.t_b >= 0) path_.reverse->set_sent(static_cast<uint64_t>(p.t_b));
      return;
    case Kind::kSyncReply: {
      last_heard_ns_ = now;
      if (path_.ping_forward && ping_outstanding_ && p.seq == ping_base_ + path_.pings_sent - 1 &&
          p.t_a == ping_t1_) {
        ping_outstanding_ = false;
        (void)path_.clock.add(p.t_a, p.t_b, p.t_c, rx);
        const uint64_t index = path_.pings_sent - 1;
        const int64_t corr = correction();
        (void)path_.ping_forward->on_packet(index, p.t_a, p.t_b,
                                            static_cast<uint32_t>(reader_.size(i)), corr);
        (void)path_.ping_reverse->on_packet(index, p.t_c, rx,
                                            static_cast<uint32_t>(reader_.size(i)), -corr);
        return;
      }
      const size_t slot = p.seq % kSyncRing;
      if (sync_seq_[slot] == p.seq && sync_t1_[slot] == p.t_a && p.t_a != 0) {
        sync_t1_[slot] = 0;  // a duplicated reply is not a second sample
        (void)path_.clock.add(p.t_a, p.t_b, p.t_c, rx);
      }
      return;
    }
    default:
      break;
  }
  if (path_.reverse) path_.reverse->on_malformed();
}

void PathRunner::drain_udp(int64_t now) {
  for (int batch = 0; batch < kMaxBatchesPerWake; ++batch) {
    const int n = reader_.receive(path_.udp->fd());
    for (int i = 0; i < n; ++i) on_datagram(i, now);
    if (n < static_cast<int>(kReceiveBatch)) return;
  }
}

bool PathRunner::on_message(const json::object& m) {
  auto type = get_string(m, "type");
  if (!type) return true;  // ignored: nothing we can act on
  if (*type == "interval") {
    const json::value* r = m.if_contains("result");
    if (r == nullptr) return true;
    if (auto interval = direction_from_json(*r)) {
      path_.report.forward_intervals.push_back(*interval);
      emit("forward", *interval);
    }
  } else if (*type == "packets") {
    const json::value* records = m.if_contains("records");
    if (records == nullptr || !records->is_array()) return true;
    for (const json::value& rec : records->get_array()) {
      if (!rec.is_array() || rec.get_array().size() != 3) continue;
      const auto& a = rec.get_array();
      if (!a[0].is_number() || !a[1].is_number() || !a[2].is_number()) continue;
      boost::system::error_code ec;
      const auto seq = a[0].to_number<uint64_t>(ec);
      const auto tx = a[1].to_number<int64_t>(ec);
      const auto rx = a[2].to_number<int64_t>(ec);
      if (!ec) path_.report.forward_packets.push_back(PacketRecord{seq, tx, rx});
    }
  } else if (*type == "result") {
    path_.result = m;
    result_received_ = true;
  } else if (*type == "error") {
    auto message = get_string(m, "message");
    fail("server " + path_.target + " ended the test: " + (message ? *message : "(no message)"));
    return false;
  }
  return true;
}

void PathRunner::take_intervals() {
  const int64_t now_rt = realtime_ns();
  if (path_.reverse) {
    const DirectionResult r = path_.reverse->take_interval(-correction(), now_rt);
    path_.report.reverse_intervals.push_back(r);
    emit("reverse", r);
  }
  if (path_.ping_forward) {
    const DirectionResult f = path_.ping_forward->take_interval(correction(), now_rt);
    const DirectionResult r = path_.ping_reverse->take_interval(-correction(), now_rt);
    path_.report.forward_intervals.push_back(f);
    path_.report.reverse_intervals.push_back(r);
    emit("forward", f);
    emit("reverse", r);
  }
}

bool PathRunner::ready_for_done(int64_t now) const {
  const bool over = now >= test_end_ns_ || stopped();
  if (spec_.mode == Mode::kPingPong) {
    return (over || path_.pings_sent >= max_pings(spec_)) && !ping_outstanding_;
  }
  if (sends_forward(spec_) && !context_.sender_done.load(std::memory_order_acquire)) return false;
  if (sends_reverse(spec_)) {
    return reverse_fin_seen_ || stopped() || now >= test_end_ns_ + kReverseFinGraceNs;
  }
  return true;
}

void PathRunner::run() {
  const int64_t now0 = monotonic_ns();
  last_heard_ns_ = now0;
  test_end_ns_ = now0 + (context_.start_ns - realtime_ns()) + spec_.duration_ns;
  const int64_t tick_ns = spec_.interval_ns > 0 ? spec_.interval_ns : kClockEveryNs;
  int64_t next_tick = now0 + (context_.start_ns - realtime_ns()) + tick_ns;
  int64_t next_sync = now0;
  bool done_sent = false;

  while (!result_received_) {
    const int64_t now = monotonic_ns();
    if (now - last_heard_ns_ > options_.peer_timeout_ns) {
      fail(fmt::format("server {} vanished: no message for {:.1f} s", path_.target,
                       (now - last_heard_ns_) / 1e9));
      break;
    }
    // Every tick due is taken before "done" can go out, however late this loop ran: a loop
    // that stalled (a loaded machine) takes each overdue interval at once, so the number of
    // interval records follows the test's length, not the machine's load.
    if (!done_sent && now >= next_tick) {
      for (; now >= next_tick; next_tick += tick_ns) {
        if (spec_.interval_ns > 0) take_intervals();
      }
      if (!path_.control.send(clock_message("clock", path_.clock, options_.clock))) {
        fail("server " + path_.target + " closed the control connection");
        break;
      }
    }
    if (!done_sent && ready_for_done(now)) {
      json::object done = clock_message("done", path_.clock, options_.clock);
      const bool forward_done = context_.sender_done.load(std::memory_order_acquire);
      done["sent"] = forward_done ? context_.sender_outcome.sent : 0;
      done["end_ns"] = forward_done && context_.sender_outcome.last_tx_ns != 0
                           ? context_.sender_outcome.last_tx_ns
                           : realtime_ns();
      if (!path_.control.send(done)) {
        fail("server " + path_.target + " closed the control connection");
        break;
      }
      done_sent = true;
    }
    if (spec_.mode == Mode::kPingPong) {
      if (ping_outstanding_ && now >= ping_deadline_ns_) ping_outstanding_ = false;  // lost
      if (!ping_outstanding_ && !done_sent && now < test_end_ns_ && !stopped() &&
          path_.pings_sent < max_pings(spec_)) {
        ping(now);
      }
    } else if (now >= next_sync) {
      send_sync(now);
      next_sync = now + kSyncSpacingNs;
    }
    int64_t wake = std::min(now + 100'000'000, next_tick);
    if (spec_.mode == Mode::kPingPong) {
      wake = std::min(wake, ping_outstanding_ ? ping_deadline_ns_ : now);
    } else {
      wake = std::min(wake, next_sync);
    }
    if (!done_sent && sends_forward(spec_) && spec_.mode != Mode::kPingPong) {
      wake = std::min(wake, now + 10'000'000);  // notice the sender finishing promptly
    }
    pollfd fds[2] = {{path_.control.fd(), POLLIN, 0}, {path_.udp->fd(), POLLIN, 0}};
    const int timeout_ms =
        static_cast<int>(std::clamp<int64_t>((wake - now + 999'999) / 1'000'000, 0, 100));
    if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) {
      fail(std::string("poll: ") + std::strerror(errno));
      break;
    }
    const int64_t after = monotonic_ns();
    // POLLERR too: a pending ICMP error (connected socket) is cleared only by a receive, and
    // left alone it would make every poll return at once.
    if ((fds[1].revents & (POLLIN | POLLERR)) != 0) drain_udp(after);
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      auto read = path_.control.read_available();
      bool ended = false;
      while (auto m = path_.control.next()) {
        last_heard_ns_ = after;
        if (!on_message(*m)) {
          ended = true;
          break;
        }
      }
      if (ended) break;
      if (!read && !result_received_) {
        fail(read.error().code == common::ErrorCode::kUnavailable
                 ? "server " + path_.target + " closed the control connection"
                 : "server " + path_.target + ": " + read.error().message);
        break;
      }
    }
  }
  path_.alive.store(false);
}

}  // namespace

void run_path(ClientPath& path, ClientContext& context) {
  PathRunner runner(path, context);
  runner.run();
}

}  // namespace detwan::perf
