// detwan-agent-bench: the control agent's benchmarks (docs/benchmarks/control.md, "Control agent").
//
//   detwan-agent-bench paths --nodes N [--reservations R] [--queries Q] [--seed S] [--json]
//       in process: a synthetic topology of N nodes (~5 links per node, a site every 10th node),
//       R committed reservations booked first, then Q path computations (POST /v1/paths
//       without HTTP) and Q admissions (reserve + journal) timed one by one: p50/p90/p99/max.
//   detwan-agent-bench scale --nodes N [--reservations R] [--queries Q] [--spread-days D]
//                            [--etcd etcd://H:P --store-key F] [--keep DIR]
//       R reservations over D days, then Q timed admissions, memory per reservation, and the
//       agent's startup from SQLite (and from etcd) with them (startup.cc).
//   detwan-agent-bench topology --nodes N [--seed S] --journal PATH [--listen ADDR:PORT]
//       the same synthetic topology as a topology file for `detwan-agent run`.
//   detwan-agent-bench load --url URL --nodes N [--seed S] --clients C --requests R [--json]
//       C client threads (keep-alive HTTP) send R reserve requests (commit) between random
//       sites of that topology at once: throughput, latency percentiles, statuses.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <boost/json.hpp>

#include "common/clock.h"
#include "common/histogram.h"
#include "common/logging.h"
#include "control/agent/agent.h"
#include "control/client/http_client.h"
#include "tools/bench/agent/startup.h"
#include "tools/bench/agent/synthetic.h"

namespace detwan::tools::agent_bench {
namespace {
namespace json = boost::json;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

json::object summary(const common::LogLinearHistogram& h) {
  return {{"count", h.count()},          {"p50_ns", h.percentile(0.5)},
          {"p90_ns", h.percentile(0.9)}, {"p99_ns", h.percentile(0.99)},
          {"max_ns", h.max()},           {"mean_ns", h.mean()}};
}

std::string ms(int64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); }

// The baseline measured beside the agent's path computation: Boost Graph Library's Dijkstra on
// the same graph with the same link weights (delay + jitter + one frame), no capacity, slots,
// windows or bounds.
class BglBaseline {
 public:
  explicit BglBaseline(const control::model::Topology& t) : graph_(t.nodes.size()) {
    for (const auto& link : t.links) {
      const int64_t frame_ns = static_cast<int64_t>(static_cast<double>(link.mtu_bytes + 18) * 8e9 /
                                                    static_cast<double>(link.capacity_bps));
      boost::add_edge(link.ends[0], link.ends[1], link.max_delay_ns() + frame_ns, graph_);
    }
  }
  // Shortest path length src -> dst (one full Dijkstra from src, as a query would run).
  int64_t query(uint32_t src, uint32_t dst) {
    std::vector<int64_t> distance(boost::num_vertices(graph_));
    std::vector<Graph::vertex_descriptor> parent(boost::num_vertices(graph_));
    boost::dijkstra_shortest_paths(
        graph_, src,
        boost::predecessor_map(boost::make_iterator_property_map(
                                   parent.begin(), boost::get(boost::vertex_index, graph_)))
            .distance_map(boost::make_iterator_property_map(
                distance.begin(), boost::get(boost::vertex_index, graph_))));
    return distance[dst];
  }

 private:
  using Graph =
      boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, boost::no_property,
                            boost::property<boost::edge_weight_t, int64_t>>;
  Graph graph_;
};

int command_paths(const SyntheticOptions& options, uint32_t reservations, uint32_t queries,
                  bool as_json) {
  auto dir =
      std::filesystem::temp_directory_path() / fmt::format("detwan-agent-bench-{}", getpid());
  std::filesystem::create_directories(dir);
  SyntheticOptions o = options;
  o.journal = (dir / "journal.db").string();
  control::model::Topology t = synthetic_topology(o);
  const size_t links = t.links.size();
  const size_t sites = t.sites.size();
  NoGateways gateways;
  control::agent::AgentOptions agent_options;
  agent_options.gateway_client = &gateways;
  agent_options.start_threads = false;
  auto agent = control::agent::Agent::open(std::move(t), agent_options);
  if (!agent) {
    std::fprintf(stderr, "detwan-agent-bench: %s\n", agent.error().message.c_str());
    return 1;
  }
  const control::model::Topology& topo = (*agent)->topology();
  std::mt19937_64 rng(options.seed * 7919 + 1);
  const int64_t base = common::RealtimeClock().now_ns() + 60'000'000'000;
  uint64_t admitted = 0;
  const int64_t fill_started = now_ns();
  for (uint32_t i = 0; i < reservations; ++i) {
    const control::agent::ReserveRequest r =
        reserve_request(random_request(topo, rng), base, std::to_string(i));
    if ((*agent)->reserve(r).has_value()) ++admitted;
  }
  const int64_t fill_ns = now_ns() - fill_started;
  common::LogLinearHistogram path_ns;
  common::LogLinearHistogram reserve_ns;
  common::LogLinearHistogram bgl_ns;
  BglBaseline bgl(topo);
  uint64_t found = 0;
  for (uint32_t i = 0; i < queries; ++i) {
    const RandomRequest q = random_request(topo, rng);
    {
      const int64_t t0 = now_ns();
      volatile int64_t d =
          bgl.query(topo.sites[topo.find_site(q.src)].node, topo.sites[topo.find_site(q.dst)].node);
      (void)d;
      bgl_ns.record(now_ns() - t0);
    }
    control::agent::PathsRequest p;
    p.src = q.src;
    p.dst = q.dst;
    p.min_bandwidth_bps = q.rate_bps;
    p.start_ns = base + q.start_offset_ns;
    p.duration_ns = q.duration_ns;
    const int64_t t0 = now_ns();
    auto answer = (*agent)->paths(p);
    path_ns.record(now_ns() - t0);
    if (answer && !answer->at("paths").as_array().empty()) ++found;
  }
  uint64_t admitted_timed = 0;
  for (uint32_t i = 0; i < queries; ++i) {
    const control::agent::ReserveRequest r =
        reserve_request(random_request(topo, rng), base, "t" + std::to_string(i));
    const int64_t t0 = now_ns();
    if ((*agent)->reserve(r).has_value()) ++admitted_timed;
    reserve_ns.record(now_ns() - t0);
  }
  const std::string check = (*agent)->check_ledger();
  agent->reset();
  std::filesystem::remove_all(dir);
  const json::object out{
      {"nodes", options.nodes},
      {"links", links},
      {"sites", sites},
      {"reservations_requested", reservations},
      {"reservations_admitted", admitted},
      {"fill_seconds", static_cast<double>(fill_ns) / 1e9},
      {"path_queries", queries},
      {"paths_found", found},
      {"path_computation", summary(path_ns)},
      {"baseline_bgl_dijkstra", summary(bgl_ns)},
      {"ratio_p99_vs_bgl", static_cast<double>(path_ns.percentile(0.99)) /
                               static_cast<double>(std::max<int64_t>(1, bgl_ns.percentile(0.99)))},
      {"reserve_admitted", admitted_timed},
      {"reserve", summary(reserve_ns)},
      {"ledger_check", check.empty() ? "ok" : check}};
  if (as_json) {
    std::printf("%s\n", json::serialize(out).c_str());
  } else {
    std::printf("%u nodes, %zu links, %zu sites; %lu of %u reservations admitted (%.1f s)\n",
                options.nodes, links, sites, admitted, reservations,
                static_cast<double>(fill_ns) / 1e9);
    std::printf("path computation (%u queries, %lu found): p50 %s  p90 %s  p99 %s  max %s\n",
                queries, found, ms(path_ns.percentile(0.5)).c_str(),
                ms(path_ns.percentile(0.9)).c_str(), ms(path_ns.percentile(0.99)).c_str(),
                ms(path_ns.max()).c_str());
    std::printf(
        "baseline, BGL Dijkstra on the same graph:        p50 %s  p90 %s  p99 %s  max %s "
        "(p99 ratio %.1fx)\n",
        ms(bgl_ns.percentile(0.5)).c_str(), ms(bgl_ns.percentile(0.9)).c_str(),
        ms(bgl_ns.percentile(0.99)).c_str(), ms(bgl_ns.max()).c_str(),
        static_cast<double>(path_ns.percentile(0.99)) /
            static_cast<double>(std::max<int64_t>(1, bgl_ns.percentile(0.99))));
    std::printf("reserve with journal (%u, %lu admitted): p50 %s  p99 %s  max %s\n", queries,
                admitted_timed, ms(reserve_ns.percentile(0.5)).c_str(),
                ms(reserve_ns.percentile(0.99)).c_str(), ms(reserve_ns.max()).c_str());
    std::printf("ledger check: %s\n", check.empty() ? "ok" : check.c_str());
  }
  return check.empty() ? 0 : 1;
}

std::string topology_yaml(const control::model::Topology& t, const std::string& listen) {
  std::string out = fmt::format(
      "# synthetic topology (detwan-agent-bench topology)\ndomain: {}\n"
      "agent:\n  name: {}\n  listen: {}\n  journal: {}\n"
      "  hold_timeout: 1h\n  max_connections: 256\n  reconcile_interval: 1h\n"
      "sites:\n",
      t.domain, t.agent.name, listen, t.agent.journal);
  for (const auto& s : t.sites)
    out += fmt::format("  - {{name: {}, gateway: gw-{}}}\n", s.name, s.name);
  out += "gateways:\n";
  for (const auto& g : t.gateways) {
    out += fmt::format("  - name: {}\n    site: {}\n    admin_socket: {}\n    ports: [", g.name,
                       t.sites[g.site].name, g.admin_socket);
    for (size_t i = 0; i < g.ports.size(); ++i) {
      out += fmt::format("{}{{name: {}, link: {}}}", i ? ", " : "", g.ports[i].name,
                         t.links[g.ports[i].link].name);
    }
    out += "]\n";
  }
  out += "nodes: [";
  bool first = true;
  for (const auto& n : t.nodes) {
    if (n.name[0] == 's') continue;
    out += fmt::format("{}{}", first ? "" : ", ", n.name);
    first = false;
  }
  out += "]\nlinks:\n";
  for (const auto& l : t.links) {
    out += fmt::format(
        "  - {{name: {}, ends: [{}, {}], capacity: {}bit, delay: {}ns, jitter: {}ns, "
        "reservable: 90%, mtu: {}, cycle: {}ns, slots: {}, guard: {}ns}}\n",
        l.name, t.nodes[l.ends[0]].name, t.nodes[l.ends[1]].name, l.capacity_bps, l.delay_ns,
        l.jitter_ns, l.mtu_bytes, l.cycle_ns, l.slot_count, l.guard_ns);
  }
  return out;
}

int command_load(const std::string& url_text, const SyntheticOptions& options, uint32_t clients,
                 uint32_t requests, uint32_t spread_s, bool as_json) {
  auto url = control::client::parse_url(url_text);
  if (!url) {
    std::fprintf(stderr, "detwan-agent-bench: %s\n", url.error().message.c_str());
    return 2;
  }
  const control::model::Topology t = synthetic_topology(options);
  std::mt19937_64 rng(options.seed * 104729 + 3);
  const int64_t base = common::RealtimeClock().now_ns() + 60'000'000'000;
  std::vector<std::string> bodies;
  for (uint32_t i = 0; i < requests; ++i) {
    const RandomRequest q = random_request(t, rng, spread_s);
    bodies.push_back(
        json::serialize(json::object{{"src", q.src},
                                     {"dst", q.dst},
                                     {"min_bandwidth_bps", q.rate_bps},
                                     {"start_unix_ns", base + q.start_offset_ns},
                                     {"duration_ns", q.duration_ns},
                                     {"commit", true},
                                     {"client_request_id", fmt::format("load-{}", i)}}));
  }
  std::atomic<uint32_t> next{0};
  std::mutex mutex;
  common::LogLinearHistogram latency;
  std::map<int, uint64_t> statuses;
  std::atomic<uint64_t> errors{0};
  const int64_t started = now_ns();
  std::vector<std::thread> threads;
  for (uint32_t c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      for (;;) {
        const uint32_t i = next++;
        if (i >= requests) return;
        const int64_t t0 = now_ns();
        auto answer =
            control::client::http_call(*url, "POST", "/v1/reservations", bodies[i], "", 60'000);
        const int64_t spent = now_ns() - t0;
        std::lock_guard lock(mutex);
        latency.record(spent);
        if (answer) {
          ++statuses[answer->status];
        } else {
          ++errors;
        }
      }
    });
  }
  for (auto& t2 : threads) t2.join();
  const int64_t elapsed = now_ns() - started;
  json::object by_status;
  for (const auto& [status, n] : statuses) by_status[std::to_string(status)] = n;
  const double rate = requests / (static_cast<double>(elapsed) / 1e9);
  const json::object out{{"clients", clients},
                         {"requests", requests},
                         {"seconds", static_cast<double>(elapsed) / 1e9},
                         {"requests_per_second", rate},
                         {"latency", summary(latency)},
                         {"statuses", std::move(by_status)},
                         {"transport_errors", errors.load()}};
  if (as_json) {
    std::printf("%s\n", json::serialize(out).c_str());
  } else {
    std::printf(
        "%u requests from %u clients in %.2f s: %.0f requests/s; latency p50 %s p99 %s max %s\n",
        requests, clients, static_cast<double>(elapsed) / 1e9, rate,
        ms(latency.percentile(0.5)).c_str(), ms(latency.percentile(0.99)).c_str(),
        ms(latency.max()).c_str());
    for (const auto& [status, n] : statuses) std::printf("  status %d: %lu\n", status, n);
    if (errors) std::printf("  transport errors: %lu\n", errors.load());
  }
  return errors == 0 ? 0 : 1;
}

int run(int argc, char** argv) {
  CLI::App app{"detwan-agent-bench: the control agent's benchmarks"};
  app.require_subcommand(1);
  SyntheticOptions options;
  uint32_t reservations = 10'000;
  uint32_t queries = 1'000;
  uint32_t clients = 32;
  uint32_t requests = 1'000;
  bool as_json = false;
  std::string listen = "127.0.0.1:0";
  std::string url;
  auto add_topology = [&](CLI::App* sub) {
    sub->add_option("--nodes", options.nodes, "nodes of the synthetic topology")
        ->capture_default_str();
    sub->add_option("--degree", options.degree, "average links per node")->capture_default_str();
    sub->add_option("--site-every", options.site_every, "every n-th node is a site")
        ->check(CLI::Range(1u, 1000u))
        ->capture_default_str();
    sub->add_option("--seed", options.seed, "random seed")->capture_default_str();
  };
  CLI::App* paths = app.add_subcommand("paths", "path computation and admission in process");
  add_topology(paths);
  paths->add_option("--reservations", reservations, "reservations booked first")
      ->capture_default_str();
  paths->add_option("--queries", queries, "timed path computations")->capture_default_str();
  paths->add_flag("--json", as_json);
  ScaleOptions scale;
  CLI::App* scale_cmd =
      app.add_subcommand("scale", "many reservations: admission, memory, startup (SQLite, etcd)");
  add_topology(scale_cmd);
  scale_cmd->add_option("--reservations", scale.reservations, "reservations booked first")
      ->capture_default_str();
  scale_cmd->add_option("--queries", scale.queries, "timed admissions")->capture_default_str();
  scale_cmd->add_option("--spread-days", scale.spread_days, "start times within this many days")
      ->capture_default_str();
  scale_cmd
      ->add_option("--plans", scale.plans,
                   "timed co-scheduling plans (a pool at every site, jobs of 8-24 ranks)")
      ->capture_default_str();
  scale_cmd->add_option("--etcd", scale.etcd, "etcd://HOST:PORT,...: also the startup from etcd");
  scale_cmd->add_option("--store-key", scale.store_key, "with --etcd: the store key file");
  scale_cmd->add_option("--keep", scale.keep_dir,
                        "keep the journal in DIR; with one there, time the startup alone");
  scale_cmd->add_flag("--json", as_json);
  CLI::App* topology = app.add_subcommand("topology", "print the synthetic topology file");
  add_topology(topology);
  topology->add_option("--journal", options.journal, "the agent's journal")->required();
  topology->add_option("--listen", listen, "the agent's address")->capture_default_str();
  CLI::App* load = app.add_subcommand("load", "concurrent reserve requests over HTTP");
  add_topology(load);
  load->add_option("--url", url, "agent URL")->required();
  load->add_option("--clients", clients, "client threads")->capture_default_str();
  load->add_option("--requests", requests, "reserve requests in all")->capture_default_str();
  uint32_t spread_s = 86'400;
  load->add_option("--spread", spread_s, "start times within this many seconds")
      ->capture_default_str();
  load->add_flag("--json", as_json);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  common::LogOptions log;
  log.level = "warn";
  (void)common::init_logging("detwan-agent-bench", log);
  if (*paths) return command_paths(options, reservations, queries, as_json);
  if (*scale_cmd) return command_scale(options, scale, as_json);
  if (*topology) {
    std::fputs(topology_yaml(synthetic_topology(options), listen).c_str(), stdout);
    return 0;
  }
  return command_load(url, options, clients, requests, spread_s, as_json);
}

}  // namespace
}  // namespace detwan::tools::agent_bench

int main(int argc, char** argv) {
  try {
    return detwan::tools::agent_bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwan-agent-bench: %s\n", e.what());
    return 1;
  }
}
