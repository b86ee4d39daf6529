#pragma once
// Helpers of the engine tests: a two-site configuration built in code, IP packet builders that
// mark each packet with (source, sequence), and seeded traffic sources.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dataplane/gw/config.h"
#include "dataplane/sched/gate_control_list.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::gw::testing {

using Bytes = std::vector<std::byte>;

inline constexpr int64_t kUs = 1'000;
inline constexpr int64_t kMs = 1'000'000;

inline Endpoint v4_endpoint(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) {
  Endpoint e;
  e.address[0] = a;
  e.address[1] = b;
  e.address[2] = c;
  e.address[3] = d;
  e.port = port;
  return e;
}

inline Endpoint v6_endpoint(uint8_t last, uint16_t port) {
  Endpoint e;
  e.ipv6 = true;
  e.address[0] = 0xfd;
  e.address[15] = last;
  e.port = port;
  return e;
}

inline Prefix v4_prefix(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t length) {
  Prefix p;
  p.address[0] = a;
  p.address[1] = b;
  p.address[2] = c;
  p.address[3] = d;
  p.length = length;
  return p;
}

inline Prefix v6_prefix(uint8_t second, uint8_t length) {
  Prefix p;
  p.ipv6 = true;
  p.address[0] = 0xfd;
  p.address[1] = second;
  p.length = length;
  return p;
}

// The slot layout both sites use on wan1 (1 Gbit/s, cycle 1 ms, 20 slots of 50 us, guard 13 us,
// which is longer than one 1518-byte frame at 1 Gbit/s, 12.144 us):
//   tunnel 7: slots 0-7  (window 400 us, guaranteed (400 - 13 - 12.144) us/ms = 374.8 Mbit/s),
//             reserved 350 Mbit/s, every packet to its prefix;
//   tunnel 9: slots 10-13 (200 us, guaranteed 174.8 Mbit/s), reserved 150 Mbit/s, UDP ports
//             5000-5999 only (other traffic to its prefix is best effort);
//   best effort: slots 8-9 and 14-19.
inline constexpr uint64_t kLineRateBps = 1'000'000'000;
inline constexpr uint64_t kRate7Bps = 350'000'000;
inline constexpr uint64_t kRate9Bps = 150'000'000;

struct SiteOptions {
  int64_t bound7_ns = 5 * kMs;
  int64_t bound9_ns = 0;
  sched::OverRateAction over_rate7 = sched::OverRateAction::kDrop;
  sched::LateAction late7 = sched::LateAction::kDeliver;
  std::optional<int64_t> peer_clock_offset_ns;  // this site's clock - the other's; nullopt: auto
  int64_t time_exchange_interval_ns = 10 * kMs;
  int64_t keepalive_interval_ns = 5 * kMs;
  int64_t dead_after_ns = 30 * kMs;
  uint32_t queue7_frames = 1024;
  bool ipv6_wan = false;
  bool second_port = false;  // add an idle port "wan2" (no tunnels)
  // 1+1 protection of tunnel 7: port "wan2" (a disjoint path), a peer "<peer>-2" through it and
  // tunnel 7's copies in slots 0-7 of wan2.
  bool protect7 = false;
  // Keys of both tunnels (a peer's tunnels are all authenticated or none); nullopt: none.
  std::optional<TunnelAuth> auth;
};

// Site 0 ("a", 10.1.0.0/16 behind it) or site 1 ("b", 10.2.0.0/16) of a two-site pair.
inline GatewayConfig site_config(int site, const SiteOptions& o = {}) {
  const auto local_of = [&](int s) {
    return o.ipv6_wan ? v6_endpoint(static_cast<uint8_t>(s + 1), 4789)
                      : v4_endpoint(192, 0, 2, static_cast<uint8_t>(s + 1), 4789);
  };
  GatewayConfig c;
  c.name = site == 0 ? "site-a" : "site-b";
  WanPortConfig port;
  port.name = "wan1";
  port.local = local_of(site);
  port.line_rate_bps = kLineRateBps;
  port.mtu_bytes = 1500;
  port.cycle_ns = 1 * kMs;
  port.slot_count = 20;
  port.guard_ns = 13 * kUs;
  port.best_effort_dscp = 10;
  c.wan_ports.push_back(port);
  if (o.second_port || o.protect7) {
    WanPortConfig second = port;
    second.name = "wan2";
    second.local.port = 4790;
    c.wan_ports.push_back(second);
  }
  PeerConfig peer;
  peer.name = site == 0 ? "site-b" : "site-a";
  peer.wan_port = "wan1";
  peer.endpoint = local_of(1 - site);
  peer.clock_offset_ns = o.peer_clock_offset_ns;
  peer.time_exchange_interval_ns = o.time_exchange_interval_ns;
  peer.keepalive_interval_ns = o.keepalive_interval_ns;
  peer.dead_after_ns = o.dead_after_ns;
  c.peers.push_back(peer);
  // Traffic from site s goes to the other site's prefix.
  const uint8_t remote = static_cast<uint8_t>(site == 0 ? 2 : 1);
  TunnelConfig t7;
  t7.id = 7;
  t7.peer = peer.name;
  t7.rate_bps = kRate7Bps;
  for (uint32_t s = 0; s <= 7; ++s) t7.slots.push_back(s);
  t7.over_rate = o.over_rate7;
  t7.bound_ns = o.bound7_ns;
  t7.late = o.late7;
  t7.queue_frames = o.queue7_frames;
  t7.dscp = 46;
  t7.dst_prefixes = {v4_prefix(10, remote, 0, 0, 16), v6_prefix(remote, 16)};
  if (o.protect7) {
    PeerConfig replica = peer;
    replica.name = peer.name + "-2";
    replica.wan_port = "wan2";
    replica.endpoint.port = 4790;  // the other site's wan2
    c.peers.push_back(replica);
    t7.protection = TunnelProtection{replica.name, t7.slots};
  }
  t7.auth = o.auth;
  c.tunnels.push_back(t7);
  TunnelConfig t9;
  t9.id = 9;
  t9.peer = peer.name;
  t9.rate_bps = kRate9Bps;
  for (uint32_t s = 10; s <= 13; ++s) t9.slots.push_back(s);
  t9.bound_ns = o.bound9_ns;
  t9.dscp = 34;
  t9.dst_prefixes = {v4_prefix(10, static_cast<uint8_t>(remote + 100), 0, 0, 16)};
  t9.udp_ports = {PortRange{5000, 5999}};
  t9.service_deliver = v4_endpoint(127, 0, 0, 1, 6000);
  t9.auth = o.auth;
  c.tunnels.push_back(t9);
  return c;
}

// The gate control list configuration of wan1 written out independently of the engine, for the
// slot oracle.
// One port of 1000 10 us slots (10 ms cycle, 10 Gbit/s) and `tunnels` tunnels of one slot
// each (ids 1000.., 5 Mbit/s, 10.(i/256).(i%256).0/24): a gateway with many tunnels.
inline GatewayConfig many_tunnels_config(uint32_t tunnels) {
  GatewayConfig c;
  c.name = "site-a";
  WanPortConfig port;
  port.name = "wan1";
  port.local = v4_endpoint(192, 0, 2, 1, 4789);
  port.line_rate_bps = 10'000'000'000;
  port.mtu_bytes = 1500;
  port.cycle_ns = 10 * kMs;
  port.slot_count = 1000;
  port.guard_ns = 100;
  c.wan_ports.push_back(port);
  PeerConfig peer;
  peer.name = "site-b";
  peer.wan_port = "wan1";
  peer.endpoint = v4_endpoint(192, 0, 2, 2, 4789);
  peer.clock_offset_ns = 0;
  c.peers.push_back(peer);
  for (uint32_t i = 0; i < tunnels; ++i) {
    TunnelConfig t;
    t.id = 1000 + i;
    t.peer = "site-b";
    t.rate_bps = 5'000'000;
    t.slots = {i % 1000};
    t.bound_ns = 20 * kMs;
    t.dst_prefixes = {v4_prefix(10, static_cast<uint8_t>(i / 256), static_cast<uint8_t>(i % 256), 0, 24)};
    c.tunnels.push_back(t);
  }
  return c;
}

inline sched::GclConfig wan1_gcl(const GatewayConfig& c) {
  sched::GclConfig g;
  const WanPortConfig& p = c.wan_ports.at(0);
  g.cycle_ns = p.cycle_ns;
  g.slot_count = p.slot_count;
  g.base_time_ns = p.base_time_ns;
  g.guard_ns = p.guard_ns;
  g.line_rate_bps = p.line_rate_bps;
  g.max_frame_bytes = p.mtu_bytes + 18;
  for (const TunnelConfig& t : c.tunnels) g.tunnels.push_back({t.id, t.rate_bps, t.slots});
  return g;
}

// Payload marker: (source, sequence) in the first 12 bytes after the IP/UDP headers.
struct Mark {
  uint32_t source = 0;
  uint64_t sequence = 0;
  friend bool operator==(const Mark&, const Mark&) = default;
};

inline void put_be(Bytes& b, std::size_t at, uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    b[at + i] = std::byte(static_cast<uint8_t>(v >> (8 * (n - 1 - i))));
}
inline uint64_t get_be(const Bytes& b, std::size_t at, std::size_t n) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | std::to_integer<uint8_t>(b.at(at + i));
  return v;
}

// An IPv4 packet of `bytes` total (>= 40) to 10.x.y.z, UDP (protocol 17) or TCP (6).
inline Bytes ipv4_packet(const uint8_t dst[4], uint16_t dst_port, std::size_t bytes, Mark mark,
                         uint8_t protocol = 17) {
  Bytes p(bytes);
  p[0] = std::byte{0x45};
  put_be(p, 2, bytes, 2);
  p[8] = std::byte{64};
  p[9] = std::byte{protocol};
  const uint8_t src[4] = {10, 99, 0, 1};
  for (int i = 0; i < 4; ++i) {
    p[12 + i] = std::byte{src[i]};
    p[16 + i] = std::byte{dst[i]};
  }
  put_be(p, 20, 40000, 2);
  put_be(p, 22, dst_port, 2);
  put_be(p, 24, bytes - 20, 2);
  put_be(p, 28, mark.source, 4);
  put_be(p, 32, mark.sequence, 8);
  return p;
}

// An IPv6 UDP packet of `bytes` total (>= 60) to fd<second>::<last>.
inline Bytes ipv6_packet(uint8_t second, uint8_t last, uint16_t dst_port, std::size_t bytes,
                         Mark mark) {
  Bytes p(bytes);
  p[0] = std::byte{0x60};
  put_be(p, 4, bytes - 40, 2);
  p[6] = std::byte{17};
  p[7] = std::byte{64};
  p[24] = std::byte{0xfd};
  p[25] = std::byte{second};
  p[39] = std::byte{last};
  put_be(p, 40, 40000, 2);
  put_be(p, 42, dst_port, 2);
  put_be(p, 44, bytes - 40, 2);
  put_be(p, 48, mark.source, 4);
  put_be(p, 52, mark.sequence, 8);
  return p;
}

inline Mark mark_of(const Bytes& ip_packet) {
  const bool v6 = (std::to_integer<uint8_t>(ip_packet.at(0)) >> 4) == 6;
  const std::size_t at = v6 ? 48 : 28;
  return {static_cast<uint32_t>(get_be(ip_packet, at, 4)), get_be(ip_packet, at + 4, 8)};
}

// Seeded packet source: exponential gaps at a mean rate, uniform sizes (bytes of IP packet).
class Source {
 public:
  Source(uint32_t id, uint64_t seed, double offered_bps, uint32_t min_bytes, uint32_t max_bytes,
         int64_t start_ns)
      : id_(id), rng_(seed), min_(min_bytes), max_(max_bytes) {
    mean_gap_ns_ = (min_bytes + max_bytes) / 2.0 * 8e9 / offered_bps;
    next_ns_ = start_ns + gap();
  }
  [[nodiscard]] int64_t next_ns() const { return next_ns_; }
  [[nodiscard]] uint32_t id() const { return id_; }
  // Size of the packet due at next_ns(), then schedules the next one.
  uint32_t take(uint64_t* sequence) {
    const auto bytes = static_cast<uint32_t>(min_ + rng_() % (max_ - min_ + 1));
    *sequence = ++sequence_;
    next_ns_ += gap();
    return bytes;
  }
  [[nodiscard]] uint64_t emitted() const { return sequence_; }

 private:
  int64_t gap() {
    const double u = (static_cast<double>(rng_() >> 11) + 0.5) * 0x1.0p-53;
    const auto v = static_cast<int64_t>(-std::log(u) * mean_gap_ns_);
    return v < 1 ? 1 : v;
  }
  uint32_t id_;
  std::mt19937_64 rng_;
  uint32_t min_, max_;
  double mean_gap_ns_ = 0;
  int64_t next_ns_ = 0;
  uint64_t sequence_ = 0;
};

}  // namespace detwan::dataplane::gw::testing
