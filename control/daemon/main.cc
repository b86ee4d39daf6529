// detwan-agent: the control agent of one administrative domain (docs/control.md).
//
//   detwan-agent run --topology FILE [--listen ADDR:PORT] [--journal PATH] [--log-level L]
//   detwan-agent run --topology FILE --store etcd://H:P,... --store-key FILE --replica NAME
//                    --advertise URL [--lease-ttl 2s]     one replica of an agent on etcd
//   detwan-agent check --topology FILE            validate the topology, print a summary
//   detwan-agent journal-check --topology FILE [--journal PATH | --store STORE --store-key F]
//                                                 replay the journal, verify nothing over-booked
//   detwan-agent migrate --topology FILE --from STORE --to STORE [--store-key FILE]
//                                                 copy a domain's whole state between stores
// STORE: sqlite:PATH or etcd://HOST:PORT[,HOST:PORT...] (docs/control.md, "The agent on etcd").
//   detwan-agent --version
//
// Exit status (docs/errors.md): 0 success, 1 runtime failure, 2 bad configuration or usage.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "common/clock.h"
#include "common/logging.h"
#include "common/service_notify.h"
#include "common/units.h"
#include "common/version.h"
#include "control/agent/agent.h"
#include "control/api/console_routes.h"
#include "control/api/http_server.h"
#include "control/api/routes.h"
#include "control/daemon/replica.h"
#include "control/journal/journal.h"
#include "control/store/etcd_store.h"

namespace detwan::control::api {
std::string_view openapi_document();  // generated from docs/control-api.yaml
}

namespace detwan::control::daemon {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;

std::atomic<bool> stop_requested{false};
std::atomic<bool> reload_requested{false};
extern "C" void on_stop_signal(int) { stop_requested.store(true); }
extern "C" void on_reload_signal(int) { reload_requested.store(true); }

int fail(const common::Error& error) {
  std::fprintf(stderr, "detwan-agent: %s\n", error.message.c_str());
  return error.code == common::ErrorCode::kConfig ||
                 error.code == common::ErrorCode::kInvalidArgument
             ? kExitBadInput
             : kExitFailure;
}

struct Settings {
  std::string topology;
  std::string listen;
  std::string journal;
  std::string log_level = "info";
  std::string store;  // "", sqlite:PATH or etcd://...
  std::string store_key;
  std::string replica;
  std::string advertise;
  std::string lease_ttl = "5s";
  std::string warm_sync = "1s";
  std::string from;  // migrate
  std::string to;
};

bool is_etcd(const std::string& store) { return store.starts_with("etcd://"); }

// A store named on the command line, unfenced (check, migrate).
common::Result<std::unique_ptr<journal::Store>> open_store(const std::string& spec,
                                                           const model::Topology& t,
                                                           const std::string& key_file) {
  if (spec.starts_with("sqlite:")) {
    auto journal = journal::Journal::open(spec.substr(7), t.agent.journal_sync_full, t.domain);
    if (!journal) return std::unexpected(journal.error());
    return std::unique_ptr<journal::Store>(std::move(*journal));
  }
  auto endpoints = store::parse_etcd_url(spec);
  if (!endpoints) return std::unexpected(endpoints.error());
  if (key_file.empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              spec + " needs --store-key FILE (the key its values are sealed with)");
  }
  auto key = store::read_store_key(key_file);
  if (!key) return std::unexpected(key.error());
  auto client = store::EtcdClient::create(*endpoints);
  if (!client) return std::unexpected(client.error());
  auto opened = store::EtcdStore::open(std::move(*client),
                                       store::EtcdStoreOptions{t.domain, *key, {}},
                                       spec + store::domain_prefix(t.domain));
  if (!opened) return std::unexpected(opened.error());
  return std::unique_ptr<journal::Store>(std::move(*opened));
}

common::Result<model::Topology> load(const Settings& s) {
  auto topology = model::load_topology(s.topology);
  if (!topology) return topology;
  if (!s.listen.empty()) {
    auto listen = common::parse_host_port(s.listen, true);
    if (!listen) {
      return common::make_error(common::ErrorCode::kInvalidArgument,
                                "--listen: " + listen.error().message);
    }
    topology->agent.api.listen = *listen;
  }
  if (!s.journal.empty()) topology->agent.journal = s.journal;
  if (s.store.starts_with("sqlite:")) {
    topology->agent.journal = s.store.substr(7);
  } else if (!s.store.empty() && !is_etcd(s.store)) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "--store '" + s.store + "': sqlite:PATH or etcd://HOST:PORT,...");
  }
  return topology;
}

api::TlsServerOptions tls_options(const model::ApiSettings& api) {
  return api::TlsServerOptions{api.tls.cert, api.tls.key, api.tls.client_ca,
                               api.tls.require_client_cert};
}

int command_check(const Settings& s) {
  auto t = load(s);
  if (!t) return fail(t.error());
  std::printf("domain %s, agent %s: %zu sites, %zu gateways, %zu nodes, %zu links\n",
              t->domain.c_str(), t->agent.name.c_str(), t->sites.size(), t->gateways.size(),
              t->nodes.size(), t->links.size());
  for (const model::Link& l : t->links) {
    std::printf(
        "link %s %s-%s: %s, delay %s +/- %s, loss %g, reservable %s (%u of %u slots of %s)\n",
        l.name.c_str(), t->nodes[l.ends[0]].name.c_str(), t->nodes[l.ends[1]].name.c_str(),
        common::format_rate_bps(l.capacity_bps).c_str(),
        common::format_duration_ns(l.delay_ns).c_str(),
        common::format_duration_ns(l.jitter_ns).c_str(), l.loss,
        common::format_rate_bps(l.reservable_bps()).c_str(), l.reservable_slots(), l.slot_count,
        common::format_duration_ns(l.cycle_ns).c_str());
  }
  const model::ApiSettings& api_settings = t->agent.api;
  if (auto tls = api::check_tls_options(tls_options(api_settings)); !tls) return fail(tls.error());
  if (!api_settings.tokens_file.empty()) {
    if (auto tokens = api::load_tokens(api_settings.tokens_file); !tokens) {
      return fail(tokens.error());
    }
  }
  std::printf("api %s://%s%s, journal %s\n", api_settings.tls.cert.empty() ? "http" : "https",
              common::format_host_port(api_settings.listen).c_str(),
              api_settings.tls.client_ca.empty()
                  ? ""
                  : (api_settings.tls.require_client_cert ? " (client certificates required)"
                                                          : " (client certificates accepted)"),
              t->agent.journal.c_str());
  return kExitOk;
}

int command_journal_check(const Settings& s) {
  auto t = load(s);
  if (!t) return fail(t.error());
  auto store = open_store(is_etcd(s.store) ? s.store : "sqlite:" + t->agent.journal, *t,
                          s.store_key);
  if (!store) return fail(store.error());
  auto summary = agent::check_store(*t, **store);
  if (!summary) {
    std::fprintf(stderr, "detwan-agent: journal check FAILED: %s\n",
                 summary.error().message.c_str());
    return kExitFailure;
  }
  std::printf("%s\n", summary->c_str());
  return kExitOk;
}

int command_migrate(const Settings& s) {
  auto t = load(s);
  if (!t) return fail(t.error());
  auto from = open_store(s.from, *t, s.store_key);
  if (!from) return fail(from.error());
  auto to = open_store(s.to, *t, s.store_key);
  if (!to) return fail(to.error());
  auto snapshot = journal::snapshot_of(**from);
  if (!snapshot) return fail(snapshot.error());
  if (auto ok = (*to)->import_snapshot(*snapshot); !ok) return fail(ok.error());
  std::printf("migrated domain %s from %s to %s: %zu reservations, %zu events, %zu requests, "
              "%zu pools, %zu federation rows\n",
              t->domain.c_str(), (*from)->path().c_str(), (*to)->path().c_str(),
              snapshot->state.reservations.size(), snapshot->events.size(),
              snapshot->state.requests.size(), snapshot->state.pools.size(),
              snapshot->federation.size());
  return kExitOk;
}

// What a leader serves over its agent: the API with federation's routes and, when the topology
// names peers, the coordinator of federated reservations (it recovers what a restart or a
// failover interrupted before serving).
common::Result<daemon::LeaderRoutes> leader_routes(agent::Agent& agent) {
  std::shared_ptr<federation::Coordinator> coordinator;
  if (!agent.topology().federation.peers.empty()) {
    auto opened = federation::Coordinator::open(agent, federation::CoordinatorOptions{});
    if (!opened) return std::unexpected(opened.error());
    coordinator = std::move(*opened);
  }
  auto federation_routes = api::make_federation_routes(agent, coordinator.get());
  if (!federation_routes) return std::unexpected(federation_routes.error());
  api::Handler routes = api::make_handler(agent, std::string(api::openapi_document()),
                                          std::move(*federation_routes));
  return daemon::LeaderRoutes{std::move(routes),
                              [coordinator]() mutable { coordinator.reset(); }};
}

int command_run(const Settings& s) {
  common::LogOptions log_options;
  log_options.level = s.log_level;
  if (auto logging = common::init_logging("detwan-agent", log_options); !logging) {
    return fail(common::Error{common::ErrorCode::kInvalidArgument,
                              "--log-level: " + logging.error().message});
  }
  auto t = load(s);
  if (!t) return fail(t.error());
  auto log = common::logger("detwan-agent");
  const model::ApiSettings api_settings = t->agent.api;
  const std::string domain = t->domain;
  api::HttpServerOptions options;
  options.listen = api_settings.listen;
  options.allow = api_settings.allow;
  options.tokens_file = api_settings.tokens_file;
  options.max_connections = api_settings.max_connections;
  options.max_body_bytes = api_settings.max_body_bytes;
  options.request_timeout_ns = api_settings.request_timeout_ns;
  options.tls = tls_options(api_settings);
  // The operator console's page (docs/console.md) holds no data: served without a token.
  for (const std::string& path : api::console_page_paths()) options.open_paths.push_back(path);
  // One agent over SQLite, or one replica of several over etcd (replica.h): the same routes,
  // which a replica serves only while it leads.
  std::unique_ptr<agent::Agent> single;
  std::unique_ptr<Replica> replica;
  LeaderRoutes leader;
  api::Handler routes;
  if (is_etcd(s.store)) {
    auto ttl_ns = common::parse_duration_ns(s.lease_ttl);
    if (!ttl_ns || *ttl_ns < 1'000'000'000 || *ttl_ns % 1'000'000'000 != 0) {
      return fail(common::Error{common::ErrorCode::kInvalidArgument,
                                "--lease-ttl '" + s.lease_ttl + "': whole seconds, at least 1s"});
    }
    auto warm_ns = common::parse_duration_ns(s.warm_sync);
    if (!warm_ns) {
      return fail(common::Error{common::ErrorCode::kInvalidArgument,
                                "--warm-sync: " + warm_ns.error().message});
    }
    if (*warm_ns > 0 && *warm_ns < 100'000'000) {
      return fail(common::Error{common::ErrorCode::kInvalidArgument,
                                "--warm-sync '" + s.warm_sync + "': 0 (no warm copy) or at "
                                "least 100ms"});
    }
    ReplicaSettings replica_settings{s.store, s.store_key, s.replica, s.advertise,
                                     *ttl_ns / 1'000'000'000};
    replica_settings.warm_sync_ms = *warm_ns / 1'000'000;
    auto started = Replica::start(std::move(*t), std::move(replica_settings), leader_routes);
    if (!started) return fail(started.error());
    replica = std::move(*started);
    routes = replica->handler();
    log->info("replica {} of domain {}: state in {}, standing for election", s.replica, domain,
              replica->description());
  } else {
    if (!s.replica.empty() || !s.advertise.empty()) {
      return fail(common::Error{common::ErrorCode::kInvalidArgument,
                                "--replica/--advertise need --store etcd://... (a single agent "
                                "on SQLite has no replicas)"});
    }
    auto agent = agent::Agent::open(std::move(*t), agent::AgentOptions{});
    if (!agent) return fail(agent.error());
    single = std::move(*agent);
    auto made = leader_routes(*single);
    if (!made) return fail(made.error());
    leader = std::move(*made);
    routes = leader.routes;
  }
  // /metrics also shows the server's own counters (TLS and token refusals among them).
  auto server_ptr = std::make_shared<std::atomic<api::HttpServer*>>(nullptr);
  api::Handler handler = [routes, server_ptr](api::HttpRequest request, api::Respond respond) {
    if (request.method == "GET" && request.path == "/metrics") {
      respond = [respond, server_ptr](api::HttpResponse response) {
        const api::HttpServer* s = server_ptr->load();
        if (s != nullptr && response.status == 200) {
          response.body += api::http_counters_text(s->counters());
        }
        respond(std::move(response));
      };
    }
    routes(std::move(request), std::move(respond));
  };
  auto server = api::HttpServer::start(options, handler);
  if (!server) return fail(server.error());
  server_ptr->store(server->get());
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  action.sa_handler = on_reload_signal;  // SIGHUP: the tokens file read again
  sigaction(SIGHUP, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::string allow;
  for (const auto& p : api_settings.allow)
    allow += (allow.empty() ? "" : ", ") + common::format_ip_prefix(p);
  const bool https = !api_settings.tls.cert.empty();
  const std::string url = fmt::format("{}://{}", https ? "https" : "http",
                                      common::format_host_port((*server)->local_endpoint()));
  const common::IpAddress& a = api_settings.listen.address;
  const bool loopback =
      a.ipv6 ? common::prefix_contains(*common::parse_ip_prefix("::1/128"), a) : a.bytes[0] == 127;
  if (!https && !loopback) {
    log->warn(
        "the API speaks plain HTTP on {}, not a loopback address: tokens and reservations "
        "cross the network in clear text (give agent.tls: docs/trust.md)",
        url);
  }
  log->info("domain {}: listening on {} (clients from {}{})", domain, url,
            allow, api_settings.tokens_file.empty() ? "" : ", bearer tokens required");
  std::printf("listening on %s\n", url.c_str());
  std::fflush(stdout);
  // Under systemd (Type=notify): ready now, the watchdog pinged from this loop, stopping below.
  common::ServiceNotifier notifier;
  const std::string ready_status =
      fmt::format("domain {}: listening on {}", domain, url);
  notifier.ready(ready_status);
  while (!stop_requested.load()) {
    notifier.heartbeat(common::MonotonicClock().now_ns());
    if (replica) replica->poll();
    if (reload_requested.exchange(false)) {
      // SIGHUP (systemd's ExecReload): the tokens file again, so that tokens are added, revoked
      // or changed without a restart; the topology and the rest need one (docs/control.md).
      notifier.reloading("reloading " + api_settings.tokens_file);
      auto reloaded = (*server)->reload_tokens();
      std::string outcome;
      if (reloaded) {
        outcome = fmt::format("reloaded {}: {} tokens", api_settings.tokens_file, *reloaded);
        log->info("SIGHUP: {}", outcome);
      } else {
        outcome = "reload refused: " + reloaded.error().message;
        log->error("SIGHUP: {}", outcome);
      }
      notifier.ready(ready_status + "; last reload: " + outcome);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  notifier.stopping("stopping");
  log->info("stopping");
  (*server)->stop();
  replica.reset();  // resigns: another replica takes over without waiting for the lease
  if (leader.close) leader.close();
  single.reset();
  return kExitOk;
}

int main_impl(int argc, char** argv) {
  CLI::App app{"detwan-agent: reservations of deterministic tunnels (docs/control.md)"};
  app.set_version_flag("--version", common::version_line("detwan-agent"));
  app.require_subcommand(1);
  Settings s;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--topology", s.topology, "topology file (YAML)")->required();
    sub->add_option("--journal", s.journal, "SQLite journal (overrides agent.journal)");
    sub->add_option("--store-key", s.store_key,
                    "with an etcd store: the file of the 32-byte key its values are sealed with");
  };
  CLI::App* run = app.add_subcommand(
      "run", "serve the API until SIGINT/SIGTERM (SIGHUP: reload the tokens file)");
  add_common(run);
  run->add_option("--listen", s.listen, "ADDR:PORT (overrides agent.listen; port 0 picks one)");
  run->add_option("--log-level", s.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  run->add_option("--store", s.store,
                  "sqlite:PATH (one agent, the default: agent.journal) or "
                  "etcd://HOST:PORT[,HOST:PORT...] (replicas, one elected leader)");
  run->add_option("--replica", s.replica, "with etcd: this replica's name, unique in the domain");
  run->add_option("--advertise", s.advertise,
                  "with etcd: this replica's API URL as clients reach it (followers show the "
                  "leader's)");
  run->add_option("--lease-ttl", s.lease_ttl,
                  "with etcd: the leader's lease; a dead leader is replaced within it")
      ->capture_default_str();
  run->add_option("--warm-sync", s.warm_sync,
                  "with etcd: a follower syncs its warm copy of the state this often, so that "
                  "once elected it reads only what changed (0: no copy, reads everything)")
      ->capture_default_str();
  CLI::App* check = app.add_subcommand("check", "validate the topology and print a summary");
  add_common(check);
  CLI::App* journal_check =
      app.add_subcommand("journal-check", "replay the journal and verify nothing is over-booked");
  add_common(journal_check);
  journal_check->add_option("--store", s.store, "sqlite:PATH or etcd://HOST:PORT,... to check");
  CLI::App* migrate = app.add_subcommand(
      "migrate", "copy a domain's whole state from one store into an empty one");
  add_common(migrate);
  migrate->add_option("--from", s.from, "sqlite:PATH or etcd://HOST:PORT,...")->required();
  migrate->add_option("--to", s.to, "sqlite:PATH or etcd://HOST:PORT,... (empty)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }
  if (*run) return command_run(s);
  if (*check) return command_check(s);
  if (*migrate) return command_migrate(s);
  return command_journal_check(s);
}

}  // namespace
}  // namespace detwan::control::daemon

int main(int argc, char** argv) {
  try {
    return detwan::control::daemon::main_impl(argc, argv);
  } catch (const detwan::common::Failure& failure) {
    std::fprintf(stderr, "detwan-agent: %s\n", failure.error().message.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwan-agent: %s\n", e.what());
    return 1;
  }
}
