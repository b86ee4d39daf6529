// detwan-agent-bench scale: the agent with many reservations in its calendars (issue 36):
// books R committed reservations in process (SQLite journal, start times spread over D days so
// that they fit), records the resident memory they take, times the last Q admissions and path
// computations one by one, then times the agent's startup from its store: Agent::open over the
// SQLite journal, and -- with --etcd -- over the same state migrated into etcd (a fresh domain),
// then a failover's load through a follower's warm copy after the leader booked 100 more.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/clock.h"
#include "common/histogram.h"
#include "control/agent/agent.h"
#include "control/journal/journal.h"
#include "control/store/etcd_store.h"
#include "tools/bench/agent/startup.h"

namespace detwan::tools::agent_bench {
namespace {
namespace json = boost::json;

int64_t mono_ns() { return common::MonotonicClock().now_ns(); }

int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

json::object percentiles(const common::LogLinearHistogram& h) {
  return {{"p50_ms", h.percentile(0.5) / 1e6},
          {"p99_ms", h.percentile(0.99) / 1e6},
          {"max_ms", h.max() / 1e6}};
}

control::agent::ReserveRequest random_reserve(const control::model::Topology& t,
                                              std::mt19937_64& rng, int64_t base_ns,
                                              uint32_t spread_days, const std::string& tag) {
  return reserve_request(random_request(t, rng, spread_days * 86'400), base_ns, tag);
}

}  // namespace

int command_scale(const SyntheticOptions& options, const ScaleOptions& scale, bool as_json) {
  const bool keep = !scale.keep_dir.empty();
  auto dir = keep ? std::filesystem::path(scale.keep_dir)
                  : std::filesystem::temp_directory_path() /
                        fmt::format("detwan-agent-scale-{}", getpid());
  std::filesystem::create_directories(dir);
  SyntheticOptions o = options;
  o.journal = (dir / "journal.db").string();
  const bool reuse = keep && std::filesystem::exists(o.journal);
  control::model::Topology t = synthetic_topology(o);
  // A fresh domain (in etcd too), or the kept journal's.
  t.domain = keep ? fmt::format("scale-{}-{}", options.nodes, options.seed)
                  : fmt::format("scale-{}", getpid());
  const control::model::Topology topology = t;
  NoGateways gateways;
  control::agent::AgentOptions agent_options;
  agent_options.gateway_client = &gateways;
  agent_options.start_threads = false;
  const int64_t rss_before = rss_bytes();
  auto agent = control::agent::Agent::open(t, agent_options);
  if (!agent) {
    std::fprintf(stderr, "detwan-agent-bench: %s\n", agent.error().message.c_str());
    return 1;
  }
  std::mt19937_64 rng(options.seed * 7919 + 1);
  const int64_t base = common::RealtimeClock().now_ns() + 60'000'000'000;
  uint64_t admitted = 0;
  const int64_t fill_started = mono_ns();
  for (uint32_t i = 0; i < (reuse ? 0 : scale.reservations); ++i) {
    if ((*agent)->reserve(random_reserve(topology, rng, base, scale.spread_days,
                                         std::to_string(i)))) {
      ++admitted;
    }
  }
  const int64_t fill_ns = mono_ns() - fill_started;
  const int64_t rss_after = rss_bytes();
  common::LogLinearHistogram reserve_ns, path_ns;
  for (uint32_t i = 0; i < (reuse ? 0 : scale.queries); ++i) {
    auto r = random_reserve(topology, rng, base, scale.spread_days, "q" + std::to_string(i));
    control::agent::PathsRequest p;
    p.src = r.spec.src;
    p.dst = r.spec.dst;
    p.min_bandwidth_bps = r.spec.min_bandwidth_bps;
    p.start_ns = r.spec.start_ns;
    p.duration_ns = r.spec.duration_ns;
    int64_t t0 = mono_ns();
    (void)(*agent)->paths(p);
    path_ns.record(mono_ns() - t0);
    t0 = mono_ns();
    if ((*agent)->reserve(r)) ++admitted;
    reserve_ns.record(mono_ns() - t0);
  }
  // The co-scheduling planner over the same calendars: a pool at every site (4-16 ranks, two
  // kinds), jobs of 8-24 ranks (some fit one site, some need two), half with a target.
  common::LogLinearHistogram plan_ns;
  json::object plan_outcomes{{"one_site", 0}, {"two_sites", 0}, {"more", 0}, {"refused", 0}};
  if (!reuse && scale.plans > 0) {
    for (const control::model::Site& site : topology.sites) {
      control::compute::Pool pool;
      pool.name = "pool-" + site.name;
      pool.site = site.name;
      pool.kind = rng() % 2 == 0 ? "gpu-a" : "gpu-b";
      pool.ranks = 4 + static_cast<uint32_t>(rng() % 13);
      pool.windows.push_back({0, std::numeric_limits<int64_t>::max()});
      (void)(*agent)->register_pool(std::move(pool));
    }
    for (uint32_t i = 0; i < scale.plans; ++i) {
      control::agent::PlanRequest plan;
      plan.job.gradient_bytes = 100'000'000 + rng() % 900'000'000;
      plan.job.ranks = 8 + static_cast<uint32_t>(rng() % 17);
      plan.job.bucket_bytes = 25 << 20;
      if (i % 2 == 1) plan.job.min_efficiency = 0.8;
      plan.step_compute_ns_by_kind = {{"gpu-a", 500'000'000}, {"gpu-b", 800'000'000}};
      plan.start_ns = base + static_cast<int64_t>(rng() % (scale.spread_days * 86'400ULL)) *
                                 1'000'000'000;
      plan.duration_ns = 2 * 3'600'000'000'000;
      const int64_t t0 = mono_ns();
      auto planned = (*agent)->plan(plan);
      plan_ns.record(mono_ns() - t0);
      const char* outcome = "refused";
      if (planned) {
        const size_t n = planned->at("placement").as_array().size();
        outcome = n == 1 ? "one_site" : n == 2 ? "two_sites" : "more";
      }
      plan_outcomes[outcome] = plan_outcomes[outcome].as_int64() + 1;
    }
  }
  const std::string check = (*agent)->check_ledger();
  if (reuse) admitted = (*agent)->list(std::nullopt).size();
  agent->reset();
  // Startup: the state read again (a restart), from SQLite: the read alone, then the whole ...
  int64_t t0 = mono_ns();
  int64_t read_ns = 0;
  {
    auto journal = control::journal::Journal::open(o.journal, false, topology.domain);
    if (journal && (*journal)->load()) read_ns = mono_ns() - t0;
  }
  t0 = mono_ns();
  auto reopened = control::agent::Agent::open(topology, agent_options);
  const int64_t sqlite_open_ns = mono_ns() - t0;
  if (!reopened) {
    std::fprintf(stderr, "detwan-agent-bench: reopen: %s\n", reopened.error().message.c_str());
    return 1;
  }
  const size_t loaded = (*reopened)->list(std::nullopt).size();
  reopened->reset();
  json::object out{{"nodes", options.nodes},
                   {"reused_journal", reuse},
                   {"links", topology.links.size()},
                   {"sites", topology.sites.size()},
                   {"reservations_requested", scale.reservations + scale.queries},
                   {"reservations_admitted", admitted},
                   {"fill_seconds", fill_ns / 1e9},
                   {"rss_bytes_per_reservation",
                    admitted > 0 ? static_cast<double>(rss_after - rss_before) /
                                       static_cast<double>(admitted)
                                 : 0.0},
                   {"reserve", percentiles(reserve_ns)},
                   {"path", percentiles(path_ns)},
                   {"plan", percentiles(plan_ns)},
                   {"plans", plan_outcomes},
                   {"ledger_check", check.empty() ? "ok" : check},
                   {"startup_sqlite_s", sqlite_open_ns / 1e9},
                   {"startup_sqlite_read_s", read_ns / 1e9},
                   {"loaded", loaded},
                   {"journal_bytes", std::filesystem::file_size(o.journal)}};
  // ... and from etcd, the same state migrated there.
  if (!scale.etcd.empty()) {
    auto endpoints = control::store::parse_etcd_url(scale.etcd);
    auto key = control::store::read_store_key(scale.store_key);
    if (!endpoints || !key) {
      std::fprintf(stderr, "detwan-agent-bench: --etcd/--store-key: %s\n",
                   (!endpoints ? endpoints.error() : key.error()).message.c_str());
      return 2;
    }
    // Always a fresh domain in etcd (a kept journal's domain may be there from a run before).
    control::model::Topology etcd_topology = topology;
    etcd_topology.domain += fmt::format("-{}", getpid());
    auto created = control::store::EtcdClient::create(*endpoints, 30'000);
    if (!created) {
      std::fprintf(stderr, "detwan-agent-bench: %s\n", created.error().message.c_str());
      return 2;
    }
    std::shared_ptr<control::store::EtcdClient> client = std::move(*created);
    auto store = control::store::EtcdStore::open(
        client, control::store::EtcdStoreOptions{etcd_topology.domain, *key, {}}, scale.etcd);
    auto journal = control::journal::Journal::open(o.journal, false, topology.domain);
    if (!store || !journal) {
      std::fprintf(stderr, "detwan-agent-bench: %s\n",
                   (!store ? store.error() : journal.error()).message.c_str());
      return 1;
    }
    t0 = mono_ns();
    auto snapshot = control::journal::snapshot_of(**journal);
    auto imported = snapshot ? (*store)->import_snapshot(*snapshot)
                             : common::Result<void>(std::unexpected(snapshot.error()));
    const int64_t migrate_ns = mono_ns() - t0;
    if (!imported) {
      std::fprintf(stderr, "detwan-agent-bench: migrate: %s\n", imported.error().message.c_str());
      return 1;
    }
    // Agent::open over an etcd store, timed; nullptr (said on stderr) when it fails.
    const auto open_over = [&](std::shared_ptr<control::store::EtcdStore> over, const char* what,
                               int64_t* ns) -> std::unique_ptr<control::agent::Agent> {
      control::agent::AgentOptions etcd_options = agent_options;
      etcd_options.store = std::move(over);
      const int64_t started = mono_ns();
      auto opened = control::agent::Agent::open(etcd_topology, etcd_options);
      *ns = mono_ns() - started;
      if (opened) return std::move(*opened);
      std::fprintf(stderr, "detwan-agent-bench: open %s: %s\n", what,
                   opened.error().message.c_str());
      return nullptr;
    };
    int64_t etcd_open_ns = 0;
    auto over_etcd = open_over(std::move(*store), "over etcd", &etcd_open_ns);
    if (!over_etcd) return 1;
    out["migrate_to_etcd_s"] = migrate_ns / 1e9;
    out["startup_etcd_s"] = etcd_open_ns / 1e9;
    out["loaded_from_etcd"] = over_etcd->list(std::nullopt).size();
    // A failover: a follower's warm copy (its first sync, in the background on a replica),
    // the leader then books `changes` more, and an elected replica loads through the copy.
    auto warm = std::make_shared<control::store::WarmRows>(
        client, control::store::domain_prefix(etcd_topology.domain), *key,
        control::store::kPageKeys);
    t0 = mono_ns();
    auto first_sync = warm->sync();
    const int64_t warm_sync_ns = mono_ns() - t0;
    if (!first_sync) {
      std::fprintf(stderr, "detwan-agent-bench: warm copy: %s\n",
                   first_sync.error().message.c_str());
      return 1;
    }
    t0 = mono_ns();
    auto idle_sync = warm->sync();  // what a follower's every sync costs when nothing changed
    const int64_t idle_sync_ns = mono_ns() - t0;
    if (!idle_sync) {
      std::fprintf(stderr, "detwan-agent-bench: warm copy: %s\n",
                   idle_sync.error().message.c_str());
      return 1;
    }
    constexpr uint32_t kChanges = 100;
    for (uint32_t i = 0; i < kChanges; ++i) {
      (void)over_etcd->reserve(random_reserve(topology, rng, base, scale.spread_days,
                                                 "failover" + std::to_string(i)));
    }
    const size_t leader_held = over_etcd->list(std::nullopt).size();
    over_etcd.reset();
    control::store::EtcdStoreOptions warm_options{etcd_topology.domain, *key, {}};
    warm_options.warm = warm;
    auto elected_store = control::store::EtcdStore::open(client, warm_options, scale.etcd);
    if (!elected_store) {
      std::fprintf(stderr, "detwan-agent-bench: %s\n", elected_store.error().message.c_str());
      return 1;
    }
    std::shared_ptr<control::store::EtcdStore> elected_shared = std::move(*elected_store);
    int64_t warm_open_ns = 0;
    auto elected = open_over(elected_shared, "through the warm copy", &warm_open_ns);
    if (!elected) return 1;
    const auto& counts = *elected_shared->warm_sync();
    out["warm_first_sync_s"] = warm_sync_ns / 1e9;
    out["warm_idle_sync_s"] = idle_sync_ns / 1e9;
    out["startup_etcd_warm_s"] = warm_open_ns / 1e9;
    out["warm_rows_read"] = counts.read;
    out["warm_rows_listed"] = counts.listed;
    out["loaded_warm"] = elected->list(std::nullopt).size();
    out["leader_held"] = leader_held;
    if (elected->list(std::nullopt).size() != leader_held) {
      std::fprintf(stderr, "detwan-agent-bench: the warm load holds %zu reservations, the "
                           "leader %zu\n",
                   elected->list(std::nullopt).size(), leader_held);
      return 1;
    }
  }
  if (!keep) std::filesystem::remove_all(dir);
  if (as_json) {
    std::printf("%s\n", json::serialize(out).c_str());
  } else {
    std::printf("%s\n", json::serialize(out).c_str());
  }
  return check.empty() && loaded == admitted ? 0 : 1;
}

}  // namespace detwan::tools::agent_bench
