// The abstract view of a domain: internal paths reduced to transits between public names.
#include "control/federation/view.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "control/admission/bounds.h"

namespace detwan::control::federation {
namespace json = boost::json;

namespace {

struct InternalPath {
  std::vector<uint32_t> links;  // in travel order
  std::vector<uint32_t> nodes;
  int64_t max_ns = 0;
  int64_t min_ns = 0;
};

// The path of least worst-case delay from node `from` to node `to` through transit nodes only
// (sites and borders are ends, never hops). Empty links: none.
InternalPath best_path(const model::Topology& t, uint32_t from, uint32_t to) {
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> dist(t.nodes.size(), inf);
  std::vector<uint32_t> via(t.nodes.size(), model::kNone);
  using Item = std::pair<int64_t, uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  dist[from] = 0;
  queue.push({0, from});
  while (!queue.empty()) {
    const auto [d, n] = queue.top();
    queue.pop();
    if (d != dist[n]) continue;
    if (n != from && t.nodes[n].site != model::kNone) continue;  // a site: an end, not a hop
    for (const uint32_t l : t.nodes[n].links) {
      const model::Link& link = t.links[l];
      const uint32_t next = link.other_end(n);
      // A transit hop's blocking: one max frame at the outgoing link's rate (bounds.h).
      const int64_t cost = link.max_delay_ns() + (n != from ? admission::max_frame_ns(link) : 0);
      if (d + cost < dist[next]) {
        dist[next] = d + cost;
        via[next] = l;
        queue.push({dist[next], next});
      }
    }
  }
  InternalPath p;
  if (dist[to] == inf || from == to) return p;
  for (uint32_t n = to; n != from;) {
    const uint32_t l = via[n];
    p.links.push_back(l);
    p.nodes.push_back(n);
    p.min_ns += t.links[l].min_delay_ns();
    n = t.links[l].other_end(n);
  }
  std::reverse(p.links.begin(), p.links.end());
  p.max_ns = dist[to];
  return p;
}

// Free capacity of every link direction of `links` as a merged step function over
// [now, now + horizon).
std::vector<CapacityStep> capacity_of(const model::Topology& t, const calendar::Ledger& ledger,
                                      const std::vector<uint32_t>& links, int64_t now_ns,
                                      int64_t horizon_ns) {
  const int64_t end_ns = now_ns + horizon_ns;
  std::set<int64_t> changes{now_ns};
  for (const uint32_t l : links) {
    for (int dir = 0; dir < 2; ++dir) {
      ledger.capacity(l, dir).for_each_change_after(now_ns, [&](int64_t at) {
        if (at >= end_ns) return false;
        changes.insert(at);
        return true;
      });
    }
  }
  std::vector<CapacityStep> steps;
  for (auto it = changes.begin(); it != changes.end(); ++it) {
    const auto next = std::next(it);
    const int64_t to = next == changes.end() ? end_ns : *next;
    uint64_t free = std::numeric_limits<uint64_t>::max();
    for (const uint32_t l : links) {
      for (int dir = 0; dir < 2; ++dir) {
        const uint64_t used = ledger.capacity(l, dir).at_bps(*it);
        const uint64_t limit = t.links[l].reservable_bps();
        free = std::min(free, limit > used ? limit - used : 0);
      }
    }
    if (!steps.empty() && steps.back().available_bps == free) {
      steps.back().to_ns = to;
    } else {
      steps.push_back(CapacityStep{*it, to, free});
    }
  }
  return steps;
}

}  // namespace

json::object build_view(const model::Topology& t, const calendar::Ledger& ledger, int64_t now_ns,
                        int64_t horizon_ns) {
  json::array borders;
  for (const model::Border& b : t.borders) {
    borders.push_back(json::object{{"name", b.name}, {"domain", b.domain}});
  }
  json::array sites;
  std::vector<uint32_t> ends;  // site indices: real sites and borders
  for (uint32_t s = 0; s < t.sites.size(); ++s) {
    ends.push_back(s);
    if (t.border_at_site(s) == nullptr) sites.push_back(json::string(t.sites[s].name));
  }
  json::array transits;
  for (const uint32_t from : ends) {
    for (const uint32_t to : ends) {
      if (from == to) continue;
      // Site -> border, border -> border and border -> site; never site -> site (local).
      if (t.border_at_site(from) == nullptr && t.border_at_site(to) == nullptr) continue;
      const InternalPath p = best_path(t, t.sites[from].node, t.sites[to].node);
      if (p.links.empty()) continue;
      json::array capacity;
      for (const CapacityStep& s : capacity_of(t, ledger, p.links, now_ns, horizon_ns)) {
        capacity.push_back(json::object{{"from_unix_ns", s.from_ns},
                                        {"to_unix_ns", s.to_ns},
                                        {"available_bps", s.available_bps}});
      }
      transits.push_back(json::object{{"from", t.sites[from].name},
                                      {"to", t.sites[to].name},
                                      {"max_latency_ns", p.max_ns},
                                      {"min_latency_ns", p.min_ns},
                                      {"capacity", std::move(capacity)}});
    }
  }
  return json::object{{"domain", t.domain},
                      {"generated_unix_ns", now_ns},
                      {"borders", std::move(borders)},
                      {"sites", std::move(sites)},
                      {"transits", std::move(transits)}};
}

uint64_t Transit::available_bps(int64_t start_ns, int64_t end_ns) const {
  if (capacity.empty()) return 0;
  uint64_t least = std::numeric_limits<uint64_t>::max();
  for (const CapacityStep& s : capacity) {
    if (s.to_ns > start_ns && s.from_ns < end_ns) least = std::min(least, s.available_bps);
  }
  if (end_ns > capacity.back().to_ns) least = std::min(least, capacity.back().available_bps);
  if (start_ns < capacity.front().from_ns) least = std::min(least, capacity.front().available_bps);
  return least == std::numeric_limits<uint64_t>::max() ? 0 : least;
}

common::Result<ParsedView> parse_view(const json::object& v) {
  auto bad = [](const std::string& what) {
    return common::make_error(common::ErrorCode::kInvalidArgument, "view: " + what);
  };
  try {
    ParsedView out;
    out.domain = std::string(v.at("domain").as_string());
    out.generated_ns = v.at("generated_unix_ns").to_number<int64_t>();
    for (const json::value& s : v.at("sites").as_array()) out.sites.emplace_back(s.as_string());
    for (const json::value& b : v.at("borders").as_array()) {
      out.borders.emplace_back(std::string(b.at("name").as_string()),
                               std::string(b.at("domain").as_string()));
    }
    for (const json::value& item : v.at("transits").as_array()) {
      const json::object& o = item.as_object();
      Transit tr;
      tr.domain = out.domain;
      tr.from = std::string(o.at("from").as_string());
      tr.to = std::string(o.at("to").as_string());
      tr.max_latency_ns = o.at("max_latency_ns").to_number<int64_t>();
      tr.min_latency_ns = o.at("min_latency_ns").to_number<int64_t>();
      for (const json::value& c : o.at("capacity").as_array()) {
        tr.capacity.push_back(CapacityStep{c.at("from_unix_ns").to_number<int64_t>(),
                                           c.at("to_unix_ns").to_number<int64_t>(),
                                           c.at("available_bps").to_number<uint64_t>()});
      }
      out.transits.push_back(std::move(tr));
    }
    if (const json::value* pools = v.if_contains("pools")) {
      for (const json::value& p : pools->as_array()) {
        const json::object& o = p.as_object();
        (void)o.at("name").as_string();
        (void)o.at("site").as_string();
        (void)o.at("kind").as_string();
        // plan() offers them as uint32_t ranks: a peer's -1 must not become 4294967295.
        for (const char* key : {"ranks", "ranks_next_hour"}) {
          const int64_t ranks = o.at(key).to_number<int64_t>();
          if (ranks < 0 || ranks > UINT32_MAX) {
            return bad(
                fmt::format("pool field '{}': {} is not in [0, {}]", key, ranks, UINT32_MAX));
          }
        }
        out.pools.push_back(p);
      }
    }
    return out;
  } catch (const std::exception& e) {
    return bad(fmt::format("malformed ({})", e.what()));
  }
}

}  // namespace detwan::control::federation
