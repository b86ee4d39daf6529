#pragma once
// Test harness: two proto::Connections wired through an in-memory network on a virtual clock.
//
// Each direction of each path has a one-way delay and seeded loss, reordering (extra delay)
// and duplication, optionally followed by a rate-limited FIFO (Bottleneck, like detwan-wanem);
// a side can be "descheduled" (pause, set_sched_jitter). `run_until` alternates: drain
// poll_transmit on both sides, collect events, advance the clock to min(next_wakeup_ns, next
// arrival), deliver arrivals. Nothing sleeps.
// The server side is created lazily from the first HELLO (as a real driver does).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <random>
#include <vector>

#include "transport/proto/connection.h"

namespace detwan::transport::proto::testing {

struct LinkFaults {
  int64_t delay_ns = 1'000'000;
  double loss = 0.0;
  double reorder = 0.0;            // probability of an extra delay
  int64_t reorder_extra_ns = 3'000'000;
  double duplicate = 0.0;
};

// A bottleneck link after the faults: a FIFO served at `rate_bps`, counting each datagram plus
// `frame_overhead_bytes` (IPv4 + UDP + Ethernet, as detwan-wanem does), tail-dropping when the
// backlog would exceed `queue_limit_bytes`. rate_bps == 0 = no bottleneck. The queue adds up to
// queue_limit_bytes / rate of delay on top of LinkFaults::delay_ns.
struct Bottleneck {
  int64_t rate_bps = 0;
  int32_t frame_overhead_bytes = 42;
  int64_t queue_limit_bytes = 0;
};

class VirtualNet {
 public:
  // side 0 = client, side 1 = server.
  VirtualNet(const ChannelOptions& client_options, const ChannelOptions& server_options,
             uint64_t seed = 1, uint64_t connection_id = 0x1234'5678'9abc'def0ULL)
      : server_options_(server_options), rng_(seed) {
    client_.emplace(ConnectionConfig{Role::kClient, connection_id, client_options}, now_ns_);
    const size_t paths = std::max<size_t>(client_options.paths.size(), 1);
    faults_[0].assign(paths, LinkFaults{});
    faults_[1].assign(paths, LinkFaults{});
    wire_bytes_[0].assign(paths, 0);
    wire_bytes_[1].assign(paths, 0);
    datagrams_[0].assign(paths, 0);
    datagrams_[1].assign(paths, 0);
    bottleneck_[0].assign(paths, BottleneckState{});
    bottleneck_[1].assign(paths, BottleneckState{});
  }

  // Bottleneck of datagrams sent by `side` on `path` (all paths if path < 0).
  void set_bottleneck(int side, const Bottleneck& b, int path = -1) {
    for (size_t p = 0; p < bottleneck_[side].size(); ++p) {
      if (path < 0 || static_cast<size_t>(path) == p) bottleneck_[side][p].config = b;
    }
  }
  // Datagrams sent by `side` dropped by the bottleneck queue / by the random loss.
  uint64_t queue_drops(int s) const {
    uint64_t n = 0;
    for (const BottleneckState& b : bottleneck_[s]) n += b.drops;
    return n;
  }
  uint64_t random_drops(int s) const { return random_drops_[s]; }
  // Largest backlog the bottleneck of (side, path) held, in bytes.
  int64_t max_queue_bytes(int s, size_t path) const { return bottleneck_[s][path].max_backlog; }

  // Simulates a descheduled driver thread: side `s` is neither polled nor fed datagrams before
  // virtual time `until_ns` (arrivals wait, as in a socket buffer).
  void pause(int s, int64_t until_ns) { paused_until_[s] = until_ns; }
  // A noisy machine: every `period_ns` of virtual time side `s` is descheduled for a uniformly
  // random 0..max_pause_ns (seeded), as pause() does.
  void set_sched_jitter(int s, int64_t period_ns, int64_t max_pause_ns) {
    jitter_period_ns_[s] = period_ns;
    jitter_max_ns_[s] = max_pause_ns;
    jitter_next_ns_[s] = now_ns_ + period_ns;
  }

  // Faults of datagrams sent by `side` on `path` (all paths if path < 0).
  void set_faults(int side, const LinkFaults& f, int path = -1) {
    for (size_t p = 0; p < faults_[side].size(); ++p) {
      if (path < 0 || static_cast<size_t>(path) == p) faults_[side][p] = f;
    }
  }
  // Called for every datagram sent by a side; may modify it; return false to drop it.
  std::function<bool(int side, std::vector<std::byte>&)> tamper;
  // Sees every datagram a side sends, with its path, before tamper and faults.
  std::function<void(int side, uint32_t path, const std::vector<std::byte>&)> observe;

  Connection& client() { return *client_; }
  Connection& server() { return *server_; }
  bool has_server() const { return server_.has_value(); }
  Connection* side(int s) { return s == 0 ? &*client_ : (server_ ? &*server_ : nullptr); }
  int64_t now_ns() const { return now_ns_; }
  std::vector<Event>& events(int s) { return events_[s]; }
  void kill(int s) { dead_[s] = true; }
  uint64_t wire_bytes(int s, size_t path) const { return wire_bytes_[s][path]; }
  uint64_t datagrams(int s, size_t path) const { return datagrams_[s][path]; }
  uint64_t spins() const { return spins_; }

  // Injects a datagram directly into side `to` now (replays, forged datagrams).
  Status inject(int to, uint32_t path, std::span<const std::byte> d) {
    return side(to)->on_datagram(path, d, now_ns_);
  }

  // Runs until pred() or until virtual time passes `limit_ns`. Returns pred().
  bool run_until(const std::function<bool()>& pred, int64_t limit_ns) {
    const int64_t end_ns = now_ns_ + limit_ns;
    for (;;) {
      pump(0);
      pump(1);
      if (pred()) return true;
      int64_t next = INT64_MAX;
      for (int s = 0; s < 2; ++s) {
        if (Connection* c = side(s); c != nullptr && !dead_[s]) {
          next = std::min(next, std::max(c->next_wakeup_ns(), paused_until_[s]));
        }
      }
      if (!queue_.empty()) next = std::min(next, queue_.top().arrive_ns);
      if (next <= now_ns_) {
        // The connection asked to be polled now although poll_transmit had nothing: a busy
        // loop in a real driver. Counted so tests can assert it does not happen.
        spins_++;
        next = now_ns_ + 1;
      }
      if (next > end_ns) {
        now_ns_ = end_ns;
        return pred();
      }
      now_ns_ = next;
      while (!queue_.empty() && queue_.top().arrive_ns <= now_ns_) {
        InFlight f = queue_.top();
        queue_.pop();
        if (paused_until_[f.to] > now_ns_) {
          f.arrive_ns = paused_until_[f.to];  // held in the socket buffer
          queue_.push(std::move(f));
          continue;
        }
        deliver(f);
      }
    }
  }

 private:
  struct InFlight {
    int64_t arrive_ns;
    uint64_t order;
    int to;
    uint32_t path;
    std::vector<std::byte> bytes;
    bool operator<(const InFlight& o) const {
      return arrive_ns != o.arrive_ns ? arrive_ns > o.arrive_ns : order > o.order;
    }
  };

  struct BottleneckState {
    Bottleneck config;
    int64_t busy_until_ns = 0;   // when the FIFO has sent everything accepted so far
    int64_t max_backlog = 0;
    uint64_t drops = 0;
  };

  // Departure time of a datagram entering the bottleneck now; nullopt = tail drop.
  std::optional<int64_t> through_bottleneck(BottleneckState& b, size_t bytes) {
    if (b.config.rate_bps <= 0) return now_ns_;
    const int64_t backlog_ns = std::max<int64_t>(b.busy_until_ns - now_ns_, 0);
    const int64_t backlog_bytes =
        static_cast<int64_t>(static_cast<double>(backlog_ns) * b.config.rate_bps / 8e9);
    const int64_t frame = static_cast<int64_t>(bytes) + b.config.frame_overhead_bytes;
    if (backlog_bytes + frame > b.config.queue_limit_bytes) {
      b.drops++;
      return std::nullopt;
    }
    b.max_backlog = std::max(b.max_backlog, backlog_bytes + frame);
    b.busy_until_ns = std::max(b.busy_until_ns, now_ns_) + frame * 8 * 1'000'000'000 /
                                                               b.config.rate_bps;
    return b.busy_until_ns;
  }

  void pump(int s) {
    Connection* c = side(s);
    if (jitter_period_ns_[s] > 0 && now_ns_ >= jitter_next_ns_[s]) {
      std::uniform_int_distribution<int64_t> pause_ns(0, jitter_max_ns_[s]);
      paused_until_[s] = now_ns_ + pause_ns(jitter_rng_);
      jitter_next_ns_[s] = now_ns_ + jitter_period_ns_[s];
    }
    if (c == nullptr || dead_[s] || paused_until_[s] > now_ns_) return;
    std::vector<std::byte> buf(c->max_datagram_bytes());
    for (;;) {
      const Transmit t = c->poll_transmit(now_ns_, buf);
      if (t.size_bytes == 0) break;
      std::vector<std::byte> d(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(t.size_bytes));
      wire_bytes_[s][t.path] += t.size_bytes;
      datagrams_[s][t.path]++;
      if (observe) observe(s, t.path, d);
      if (tamper && !tamper(s, d)) continue;
      const LinkFaults& f = faults_[s][t.path];
      std::uniform_real_distribution<double> u(0.0, 1.0);
      if (u(rng_) < f.loss) {
        random_drops_[s]++;
        continue;
      }
      int64_t delay = f.delay_ns;
      if (u(rng_) < f.reorder) delay += f.reorder_extra_ns;
      const std::optional<int64_t> departs = through_bottleneck(bottleneck_[s][t.path], d.size());
      if (!departs) continue;
      delay += *departs - now_ns_;
      queue_.push(InFlight{now_ns_ + delay, order_++, 1 - s, t.path, d});
      if (u(rng_) < f.duplicate) queue_.push(InFlight{now_ns_ + delay + 1000, order_++, 1 - s, t.path, d});
    }
    while (std::optional<Event> e = c->poll_event()) {
      // The application reads what is delivered (unless a test makes side s stop reading).
      if (e->kind == Event::Kind::kMessage) {
        if (not_reading_[s]) {
          held_bytes_[s] += e->message.size();
        } else {
          c->consumed(e->message.size());
        }
      }
      events_[s].push_back(std::move(*e));
    }
  }

 public:
  // Side s stops taking delivered messages (held as unread), or reads what it held and goes on.
  void set_reading(int s, bool reading) {
    not_reading_[s] = !reading;
    if (reading && side(s) != nullptr) side(s)->consumed(std::exchange(held_bytes_[s], 0));
  }

 private:

  void deliver(const InFlight& f) {
    if (dead_[f.to]) return;
    if (f.to == 1 && !server_) {
      if (!is_hello(f.bytes)) return;
      const std::optional<PeekedId> id = peek_connection_id(f.bytes);
      if (!id) return;
      server_.emplace(ConnectionConfig{Role::kServer, id->id, server_options_}, now_ns_);
    }
    (void)side(f.to)->on_datagram(f.path, f.bytes, now_ns_);
  }

  ChannelOptions server_options_;
  std::mt19937_64 rng_;
  int64_t now_ns_ = 1'000'000'000;
  uint64_t order_ = 0;
  uint64_t spins_ = 0;
  std::optional<Connection> client_;
  std::optional<Connection> server_;
  std::vector<LinkFaults> faults_[2];
  std::vector<uint64_t> wire_bytes_[2];
  std::vector<uint64_t> datagrams_[2];
  std::vector<Event> events_[2];
  bool dead_[2] = {false, false};
  bool not_reading_[2] = {false, false};
  uint64_t held_bytes_[2] = {0, 0};  // delivered while not reading
  std::vector<BottleneckState> bottleneck_[2];
  uint64_t random_drops_[2] = {0, 0};
  int64_t paused_until_[2] = {INT64_MIN, INT64_MIN};
  int64_t jitter_period_ns_[2] = {0, 0};
  int64_t jitter_max_ns_[2] = {0, 0};
  int64_t jitter_next_ns_[2] = {0, 0};
  std::mt19937_64 jitter_rng_{7};
  std::priority_queue<InFlight> queue_;
};

inline std::vector<std::byte> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(rng());
  return out;
}

}  // namespace detwan::transport::proto::testing
