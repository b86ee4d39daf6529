#include "dataplane/daemon/stats_table.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/units.h"

namespace detwan::dataplane::daemon {
namespace {

namespace json = boost::json;

// Follows a path of object keys; nullptr where it stops.
const json::value* at(const json::value* value, std::initializer_list<std::string_view> path) {
  for (std::string_view key : path) {
    if (value == nullptr || !value->is_object()) return nullptr;
    value = value->as_object().if_contains(key);
  }
  return value;
}

std::optional<int64_t> number(const json::value* value) {
  if (value == nullptr) return std::nullopt;
  if (value->is_int64()) return value->as_int64();
  if (value->is_uint64()) return static_cast<int64_t>(value->as_uint64());
  if (value->is_double()) return static_cast<int64_t>(value->as_double());
  return std::nullopt;
}

std::string count(const json::value* value) {
  const auto n = number(value);
  return n ? std::to_string(*n) : "-";
}

std::string text(const json::value* value) {
  if (value == nullptr) return "-";
  if (value->is_string()) return std::string(value->as_string());
  if (value->is_null()) return "-";
  return json::serialize(*value);
}

// Rounded to 3 significant digits in the largest unit that keeps it >= 1: "608s", "5.02ms",
// "12.3us", "850ns" (the exact values are in --json).
std::string readable_duration(int64_t ns) {
  const double magnitude = ns < 0 ? -static_cast<double>(ns) : static_cast<double>(ns);
  struct Unit {
    double ns;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}};
  for (const Unit& unit : kUnits) {
    if (magnitude < unit.ns) continue;
    const double value = static_cast<double>(ns) / unit.ns;
    const int decimals = magnitude >= 100 * unit.ns ? 0 : magnitude >= 10 * unit.ns ? 1 : 2;
    return fmt::format("{:.{}f}{}", value, decimals, unit.name);
  }
  return fmt::format("{}ns", ns);
}

std::string duration(const json::value* value) {
  const auto n = number(value);
  return n ? readable_duration(*n) : "-";
}

int64_t sum(std::initializer_list<const json::value*> values) {
  int64_t total = 0;
  for (const json::value* value : values) total += number(value).value_or(0);
  return total;
}

// "policed=3 missed_slot=1" from the non-zero members of counter objects; "none" if all zero.
std::string reasons(std::initializer_list<const json::value*> objects) {
  std::string out;
  for (const json::value* object : objects) {
    if (object == nullptr || !object->is_object()) continue;
    for (const auto& member : object->as_object()) {
      const auto n = number(&member.value());
      if (!n || *n == 0) continue;
      out += fmt::format("{}{}={}", out.empty() ? "" : " ", std::string_view(member.key()), *n);
    }
  }
  return out.empty() ? "none" : out;
}

// "p50 5ms  p99 5.1ms  p99.9 5.2ms  max 6ms", or "no samples".
std::string percentiles(const json::value* histogram) {
  if (number(at(histogram, {"count"})).value_or(0) == 0) return "no samples";
  return fmt::format("p50 {}  p99 {}  p99.9 {}  max {}", duration(at(histogram, {"p50"})),
                     duration(at(histogram, {"p99"})), duration(at(histogram, {"p99_9"})),
                     duration(at(histogram, {"max"})));
}

std::string p99(const json::value* histogram) {
  if (number(at(histogram, {"count"})).value_or(0) == 0) return "-";
  return duration(at(histogram, {"p99"}));
}

void append_tunnel(std::string& out, const json::value& tunnel) {
  const json::value* t = &tunnel;
  const json::value* scheduler = at(t, {"tx", "scheduler"});
  const json::value* on_time = at(t, {"rx", "on_time"});
  const json::value* best_effort = at(t, {"rx", "best_effort"});
  const auto rate = number(at(t, {"rate_bps"}));
  out += fmt::format("tunnel {} -> {} via {}  (rate {}, bound {})\n", count(at(t, {"id"})),
                     text(at(t, {"peer"})), text(at(t, {"port"})),
                     rate ? common::format_rate_bps(static_cast<uint64_t>(*rate)) : "-",
                     duration(at(t, {"bound_ns"})));
  out += fmt::format(
      "  tx  sent {} (on time {}, best effort {})  dropped: {}\n",
      sum({at(t, {"tx", "sent_on_time_packets"}), at(t, {"tx", "sent_best_effort_packets"})}),
      count(at(t, {"tx", "sent_on_time_packets"})),
      count(at(t, {"tx", "sent_best_effort_packets"})), reasons({at(scheduler, {"dropped"})}));
  out += fmt::format(
      "  rx  released {} (on time {}, best effort {})  late {}  dropped: {}\n",
      sum({at(on_time, {"released_packets"}), at(best_effort, {"released_packets"})}),
      count(at(on_time, {"released_packets"})), count(at(best_effort, {"released_packets"})),
      count(at(on_time, {"late_packets"})),
      reasons({at(on_time, {"dropped"}), at(t, {"rx", "replay_drops"})}));
  out += fmt::format("  one-way delay  {}\n", percentiles(at(on_time, {"one_way_delay_ns"})));
  out += fmt::format("  playout error p99 {}  departure error p99 {}\n",
                     p99(at(on_time, {"playout_error_ns"})),
                     p99(at(scheduler, {"departure_error_ns"})));
}

void append_port(std::string& out, const json::value& port) {
  const json::value* p = &port;
  const json::value* io = at(p, {"io"});
  out += fmt::format(
      "port {}  rx {} pkts {} B  tx {} pkts {} B  rx_errors {}  tx_errors {}  no_buffer {}\n",
      text(at(p, {"name"})), count(at(io, {"rx_packets"})), count(at(io, {"rx_bytes"})),
      count(at(io, {"tx_packets"})), count(at(io, {"tx_bytes"})), count(at(io, {"rx_errors"})),
      count(at(io, {"tx_errors"})), count(at(io, {"no_buffer"})));
  if (number(at(io, {"tx_batches"})).value_or(0) != 0 ||
      number(at(io, {"gso_refused"})).value_or(0) != 0) {
    out += fmt::format("  tx batches (UDP GSO) {}  refused by the route {}\n",
                       count(at(io, {"tx_batches"})), count(at(io, {"gso_refused"})));
  }
  out += fmt::format("  rx drops: {}\n", reasons({at(p, {"rx_drops"})}));
  out += fmt::format("  best effort tx sent {}  dropped: {}\n",
                     count(at(p, {"tx", "best_effort", "sent_packets"})),
                     reasons({at(p, {"tx", "best_effort", "dropped"})}));
}

void append_peer(std::string& out, const json::value& peer) {
  const json::value* p = &peer;
  const json::value* clock = at(p, {"clock"});
  out += fmt::format("peer {} via {}  {}  clock offset {} ({})  rtt {}  last heard {} ago\n",
                     text(at(p, {"name"})), text(at(p, {"port"})), text(at(p, {"state"})),
                     duration(at(clock, {"offset_ns"})), text(at(clock, {"source"})),
                     duration(at(clock, {"rtt_ns"})), duration(at(p, {"last_rx_age_ns"})));
}

// The change of a counter between two stats documents (0 when missing or gone backwards: the
// gateway restarted or reconfigured).
int64_t delta(const json::value* before, const json::value* now) {
  const int64_t d = number(now).value_or(0) - number(before).value_or(0);
  return d > 0 ? d : 0;
}

// The object of `list` (an array at `key`) whose "id" or "name" equals that of `item`.
const json::value* matching(const json::value& stats, std::string_view key,
                            const json::value& item) {
  const json::value* list = at(&stats, {key});
  if (list == nullptr || !list->is_array()) return nullptr;
  for (std::string_view field : {"id", "name"}) {
    const json::value* want = at(&item, {field});
    if (want == nullptr) continue;
    for (const json::value& other : list->as_array()) {
      const json::value* got = at(&other, {field});
      if (got != nullptr && *got == *want) return &other;
    }
  }
  return nullptr;
}

// The sum of the deltas of every member of a counter object ({"policed": 3, ...}).
int64_t dropped_delta(const json::value* before, const json::value* now) {
  int64_t n = 0;
  if (now == nullptr || !now->is_object()) return 0;
  for (const auto& member : now->as_object()) {
    n += delta(at(before, {member.key()}), &member.value());
  }
  return n;
}

std::string per_second(int64_t n, double seconds) {
  return fmt::format("{:.0f}", seconds > 0 ? static_cast<double>(n) / seconds : 0.0);
}

std::string bits_per_second(int64_t bytes, double seconds) {
  const double bps = seconds > 0 ? static_cast<double>(bytes) * 8 / seconds : 0.0;
  return common::format_rate_bps(static_cast<uint64_t>(bps));
}

}  // namespace

std::string format_stats_interval(const json::value& before, const json::value& now,
                                  double seconds, std::string_view label) {
  std::string out;
  const json::value* tunnels = at(&now, {"tunnels"});
  if (tunnels != nullptr && tunnels->is_array()) {
    for (const json::value& t : tunnels->as_array()) {
      const json::value* b = matching(before, "tunnels", t);
      const json::value* on_time = at(&t, {"rx", "on_time"});
      const json::value* b_on_time = at(b, {"rx", "on_time"});
      const int64_t sent = delta(at(b, {"tx", "sent_on_time_packets"}),
                                 at(&t, {"tx", "sent_on_time_packets"}));
      const int64_t released = delta(at(b_on_time, {"released_packets"}),
                                     at(on_time, {"released_packets"}));
      const int64_t dropped =
          dropped_delta(at(b, {"tx", "scheduler", "dropped"}),
                        at(&t, {"tx", "scheduler", "dropped"})) +
          dropped_delta(at(b_on_time, {"dropped"}), at(on_time, {"dropped"}));
      out += fmt::format("{}  tunnel {:<4} tx {:>8} pkt/s  rx {:>8} pkt/s  late {:>5}  "
                         "dropped {:>5}  delay p99 {}\n",
                         label, count(at(&t, {"id"})), per_second(sent, seconds),
                         per_second(released, seconds),
                         delta(at(b_on_time, {"late_packets"}), at(on_time, {"late_packets"})),
                         dropped, p99(at(on_time, {"one_way_delay_ns"})));
    }
  }
  const json::value* ports = at(&now, {"ports"});
  if (ports != nullptr && ports->is_array()) {
    for (const json::value& p : ports->as_array()) {
      const json::value* b = at(matching(before, "ports", p), {"io"});
      const json::value* io = at(&p, {"io"});
      auto moved = [&](const char* key) { return delta(at(b, {key}), at(io, {key})); };
      out += fmt::format("{}  port {:<6} rx {:>12} {:>8} pkt/s  tx {:>12} {:>8} pkt/s\n", label,
                         text(at(&p, {"name"})), bits_per_second(moved("rx_bytes"), seconds),
                         per_second(moved("rx_packets"), seconds),
                         bits_per_second(moved("tx_bytes"), seconds),
                         per_second(moved("tx_packets"), seconds));
    }
  }
  return out;
}

std::string format_stats_table(const json::value& stats) {
  std::string out = fmt::format("gateway {}  up {}\n", text(at(&stats, {"gateway"})),
                                duration(at(&stats, {"uptime_ns"})));
  auto each = [&](std::string_view key, auto&& append) {
    const json::value* list = at(&stats, {key});
    if (list == nullptr || !list->is_array()) return;
    out += '\n';
    for (const json::value& item : list->as_array()) append(out, item);
  };
  each("tunnels", append_tunnel);
  each("ports", append_port);
  each("peers", append_peer);
  const json::value* local = at(&stats, {"local"});
  out += fmt::format(
      "\nlocal  tun rx {} tx {} errors {}/{}  service rx {} tx {} errors {}/{}\n",
      count(at(local, {"tun_rx_packets"})), count(at(local, {"tun_tx_packets"})),
      count(at(local, {"tun_rx_errors"})), count(at(local, {"tun_tx_errors"})),
      count(at(local, {"service_rx_packets"})), count(at(local, {"service_tx_packets"})),
      count(at(local, {"service_rx_errors"})), count(at(local, {"service_tx_errors"})));
  out += fmt::format("loop   sleeps {} (coalesced {}, blind {})  woken by timer {} io {}\n",
                     count(at(local, {"loop_sleeps"})), count(at(local, {"loop_coalesced_sleeps"})),
                     count(at(local, {"loop_blind_sleeps"})),
                     count(at(local, {"loop_timer_wakeups"})), count(at(local, {"loop_io_wakeups"})));
  out += fmt::format("engine drops: {}\n", reasons({at(&stats, {"drops"})}));
  return out;
}

}  // namespace detwan::dataplane::daemon
