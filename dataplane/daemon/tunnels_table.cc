#include "dataplane/daemon/tunnels_table.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/json_number.h"
#include "common/units.h"
#include "dataplane/sched/gate_control_list.h"

namespace detwan::dataplane::daemon {
namespace {

namespace json = boost::json;

const json::value* field(const json::value& object, std::string_view key) {
  return object.is_object() ? object.as_object().if_contains(key) : nullptr;
}

std::string text(const json::value& object, std::string_view key) {
  const json::value* value = field(object, key);
  if (value == nullptr) return "-";
  if (value->is_string()) return value->as_string().empty() ? "-" : std::string(value->as_string());
  return json::serialize(*value);
}

std::optional<uint64_t> unsigned_number(const json::value& object, std::string_view key) {
  const json::value* value = field(object, key);
  if (value == nullptr) return std::nullopt;
  return common::json_uint64(*value);
}

std::string rate(const json::value& object, std::string_view key) {
  const auto bps = unsigned_number(object, key);
  return bps ? common::format_rate_bps(*bps) : "-";
}

std::string duration(const json::value& object, std::string_view key) {
  const auto ns = unsigned_number(object, key);
  return ns ? common::format_duration_ns(static_cast<int64_t>(*ns)) : "-";
}

std::string slots(const json::value& tunnel) {
  const json::value* list = field(tunnel, "slots");
  if (list == nullptr || !list->is_array()) return "-";
  std::vector<uint32_t> numbers;
  for (const json::value& slot : list->as_array()) {
    if (slot.is_int64()) numbers.push_back(static_cast<uint32_t>(slot.as_int64()));
    if (slot.is_uint64()) numbers.push_back(static_cast<uint32_t>(slot.as_uint64()));
  }
  return sched::format_slot_list(numbers);
}

std::string match(const json::value& tunnel) {
  const json::value* m = field(tunnel, "match");
  if (m == nullptr) return "-";
  std::string out;
  if (const json::value* dst = field(*m, "dst"); dst != nullptr && dst->is_array()) {
    for (const json::value& prefix : dst->as_array()) {
      out += fmt::format("{}{}", out.empty() ? "" : ",",
                         prefix.is_string() ? prefix.as_string().c_str() : "?");
    }
  }
  std::string ports;
  if (const json::value* udp = field(*m, "udp_ports"); udp != nullptr && udp->is_array()) {
    for (const json::value& range : udp->as_array()) {
      ports += fmt::format("{}{}", ports.empty() ? "" : ",",
                           range.is_string() ? range.as_string().c_str() : "?");
    }
  }
  if (!ports.empty()) out += " udp " + ports;
  if (const json::value* service = field(tunnel, "service"); service != nullptr) {
    out += fmt::format("{}service", out.empty() ? "" : " + ");
  }
  return out.empty() ? "-" : out;
}

}  // namespace

std::string format_tunnels_table(const json::value& answer) {
  std::string out = fmt::format("gateway {}  generation {}  boot {}\n\n", text(answer, "gateway"),
                                text(answer, "generation"), text(answer, "boot_id"));
  const json::value* tunnels = field(answer, "tunnels");
  if (tunnels == nullptr || !tunnels->is_array() || tunnels->as_array().empty()) {
    out += "no tunnels\n";
  } else {
    out += fmt::format("{:>10}  {:<12} {:<16} {:>10} {:>11}  {:<12} {:>8}  {}\n", "id", "peer",
                       "owner", "rate", "guaranteed", "slots", "bound", "match");
    for (const json::value& t : tunnels->as_array()) {
      out +=
          fmt::format("{:>10}  {:<12} {:<16} {:>10} {:>11}  {:<12} {:>8}  {}\n", text(t, "id"),
                      text(t, "peer"), text(t, "owner"), rate(t, "rate_bps"),
                      rate(t, "guaranteed_rate_bps"), slots(t), duration(t, "bound_ns"), match(t));
    }
  }
  if (const json::value* ports = field(answer, "wan_ports");
      ports != nullptr && ports->is_array()) {
    out += "\n";
    for (const json::value& p : ports->as_array()) {
      out += fmt::format("port {}  local {}  line rate {}  cycle {} / {} slots  guard {}\n",
                         text(p, "name"), text(p, "local"), rate(p, "line_rate_bps"),
                         duration(p, "cycle_ns"), text(p, "slot_count"), duration(p, "guard_ns"));
    }
  }
  if (const json::value* peers = field(answer, "peers"); peers != nullptr && peers->is_array()) {
    for (const json::value& p : peers->as_array()) {
      out += fmt::format("peer {} via {} at {}\n", text(p, "name"), text(p, "wan_port"),
                         text(p, "endpoint"));
    }
  }
  return out;
}

}  // namespace detwan::dataplane::daemon
