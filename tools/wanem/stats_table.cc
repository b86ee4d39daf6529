#include "tools/wanem/stats_table.h"

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

namespace detwan::wanem {
namespace json = boost::json;
namespace {

std::string scalar_text(const json::value& value) {
  if (value.is_string()) return std::string(value.as_string());
  return json::serialize(value);
}

// Dotted leaf names in document order.
void flatten(const json::value& value, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (value.is_object()) {
    for (const auto& member : value.as_object()) {
      flatten(member.value(),
              prefix.empty() ? std::string(member.key()) : prefix + "." + std::string(member.key()),
              out);
    }
  } else if (value.is_array()) {
    const json::array& array = value.as_array();
    for (size_t i = 0; i < array.size(); ++i) {
      flatten(array[i], prefix + "[" + std::to_string(i) + "]", out);
    }
  } else {
    out.emplace_back(prefix, scalar_text(value));
  }
}

const json::value* member(const json::value& value, std::string_view key) {
  return value.is_object() ? value.as_object().if_contains(key) : nullptr;
}

}  // namespace

std::string format_stats_table(const json::value& stats) {
  std::string out;
  if (const json::value* uptime = member(stats, "uptime_ns"); uptime && uptime->is_number()) {
    out += fmt::format("uptime: {:.3f} s", uptime->to_number<double>() / 1e9);
  }
  if (const json::value* backend = member(stats, "backend"); backend && backend->is_string()) {
    out += fmt::format("   backend: {}", std::string_view(backend->as_string()));
  }
  out += "\n";
  if (const json::value* spec = member(stats, "spec")) {
    for (const char* dir : {"ab", "ba"}) {
      if (const json::value* text = member(*spec, dir)) {
        out += fmt::format("spec {}: {}\n", dir, scalar_text(*text));
      }
    }
  }
  if (const json::value* link = member(stats, "link_up")) {
    out += fmt::format("link: ab {}, ba {}\n",
                       member(*link, "ab") ? scalar_text(*member(*link, "ab")) : "?",
                       member(*link, "ba") ? scalar_text(*member(*link, "ba")) : "?");
  }
  if (const json::value* port = member(stats, "port")) {
    out += fmt::format("\n{:<14}{:>16}{:>16}\n", "port", "side A", "side B");
    for (const char* key : {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes"}) {
      const json::value* a = member(*port, "a");
      const json::value* b = member(*port, "b");
      out += fmt::format("{:<14}{:>16}{:>16}\n", key,
                         a && member(*a, key) ? scalar_text(*member(*a, key)) : "-",
                         b && member(*b, key) ? scalar_text(*member(*b, key)) : "-");
    }
    if (const json::value* drops = member(*port, "drops"); drops && drops->is_object()) {
      out += "port drops:";
      for (const auto& entry : drops->as_object()) {
        out += fmt::format(" {}={}", std::string_view(entry.key()), scalar_text(entry.value()));
      }
      out += "\n";
    }
  }
  // Engine counters: per traffic class, the counters and a few percentiles; histogram details
  // and anything unexpected stay in --json. Classes nobody offered to are left out.
  const json::value* engine[2] = {member(stats, "ab"), member(stats, "ba")};
  auto cell = [&](int dir, const std::string& path) -> std::string {
    const json::value* node = engine[dir];
    size_t start = 0;
    while (node != nullptr && start <= path.size()) {
      const size_t dot = std::min(path.find('.', start), path.size());
      node = member(*node, path.substr(start, dot - start));
      start = dot + 1;
    }
    return node == nullptr ? std::string("-") : scalar_text(*node);
  };
  out += fmt::format("\n{:<34}{:>16}{:>16}\n", "engine", "ab", "ba");
  for (const char* traffic_class : {"reserved", "best_effort", "cross"}) {
    const std::string prefix = std::string(traffic_class) + ".";
    if (cell(0, prefix + "offered_packets") == "0" && cell(1, prefix + "offered_packets") == "0") {
      continue;
    }
    std::vector<std::string> rows = {"offered_packets", "offered_bytes",      "forwarded_packets",
                                     "forwarded_bytes", "duplicated_packets", "reordered_packets"};
    for (int dir = 0; dir < 2; ++dir) {
      const json::value* dropped = engine[dir] ? member(*engine[dir], traffic_class) : nullptr;
      dropped = dropped ? member(*dropped, "dropped") : nullptr;
      if (dropped == nullptr || !dropped->is_object()) continue;
      for (const auto& reason : dropped->as_object()) {
        const std::string row = "dropped." + std::string(reason.key());
        if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows.push_back(row);
      }
    }
    for (const char* histogram : {"sojourn_ns", "queue_depth_bytes"}) {
      for (const char* quantile : {"p50", "p99", "max"}) {
        rows.push_back(std::string(histogram) + "." + quantile);
      }
    }
    for (const std::string& row : rows) {
      out += fmt::format("{:<34}{:>16}{:>16}\n", prefix + row, cell(0, prefix + row),
                         cell(1, prefix + row));
    }
  }
  for (const char* key : {"held_frames", "queued_bytes", "link_forced_down"}) {
    out += fmt::format("{:<34}{:>16}{:>16}\n", key, cell(0, key), cell(1, key));
  }
  if (const json::value* loop = member(stats, "loop")) {
    std::vector<std::pair<std::string, std::string>> rows;
    flatten(*loop, "loop", rows);
    out += "\n";
    for (const auto& [name, value] : rows) out += fmt::format("{:<34}{:>16}\n", name, value);
  }
  return out;
}

}  // namespace detwan::wanem
