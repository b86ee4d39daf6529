#include "control/daemon/replica.h"

#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/logging.h"
#include "control/gateway/reconciler.h"

namespace detwan::control::daemon {
namespace {

namespace json = boost::json;

// The gateways are programmed only while this replica's lease is certainly alive: a leader
// that was paused (SIGSTOP) or cut off from etcd finds its requests refused here before it
// learns its term is over.
class FencedGatewayClient final : public gateway::GatewayClient {
 public:
  explicit FencedGatewayClient(const store::LeaderElection& election) : election_(election) {}
  common::Result<std::string> request(const std::string& socket, const std::string& line) override {
    if (!election_.leading_now()) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                "not sent to " + socket +
                                    ": this replica's lease is not "
                                    "certainly alive (no longer, or not yet, the leader)");
    }
    return inner_.request(socket, line);
  }

 private:
  const store::LeaderElection& election_;
  gateway::UnixGatewayClient inner_;
};

json::value leader_json(const std::optional<store::LeaderInfo>& leader) {
  if (!leader) return nullptr;
  return json::object{{"replica", leader->replica}, {"url", leader->url}};
}

}  // namespace

struct Replica::Term {
  int64_t create_revision = 0;
  std::unique_ptr<FencedGatewayClient> gateways;  // outlives the agent (declared first)
  std::shared_ptr<store::EtcdStore> store;
  std::unique_ptr<agent::Agent> agent;
  LeaderRoutes routes;
  ~Term() {
    if (routes.close) routes.close();
    agent.reset();
  }
};

Replica::Replica(model::Topology topology, ReplicaSettings settings, MakeRoutes make_routes)
    : topology_(std::move(topology)),
      settings_(std::move(settings)),
      make_routes_(std::move(make_routes)) {}

Replica::~Replica() {
  stop_warming();
  {
    std::lock_guard lock(mutex_);
    term_.reset();
  }
  election_.reset();  // resigns: another replica is elected without waiting for the TTL
}

common::Result<std::unique_ptr<Replica>> Replica::start(model::Topology topology,
                                                        ReplicaSettings settings,
                                                        MakeRoutes make_routes) {
  auto endpoints = store::parse_etcd_url(settings.store);
  if (!endpoints) return std::unexpected(endpoints.error());
  if (settings.store_key_file.empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              "--store etcd://... needs --store-key FILE (32 random bytes, the "
                              "same file on every replica: it seals what etcd holds)");
  }
  if (settings.replica.empty() || settings.advertise.empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              "--store etcd://... needs --replica NAME and --advertise URL (how "
                              "clients reach this replica)");
  }
  std::unique_ptr<Replica> r(
      new Replica(std::move(topology), std::move(settings), std::move(make_routes)));
  auto key = store::read_store_key(r->settings_.store_key_file);
  if (!key) return std::unexpected(key.error());
  r->store_key_ = std::move(*key);
  r->description_ = r->settings_.store + store::domain_prefix(r->topology_.domain);
  auto client = store::EtcdClient::create(*endpoints);
  if (!client) return std::unexpected(client.error());
  r->client_ = std::move(*client);
  // Checks now that etcd answers, the domain is this one and the key opens its values.
  auto probe = store::EtcdStore::open(
      r->client_, store::EtcdStoreOptions{r->topology_.domain, r->store_key_, {}}, r->description_);
  if (!probe) return std::unexpected(probe.error());
  auto election = store::LeaderElection::start(
      r->client_, store::ElectionOptions{r->topology_.domain, r->settings_.replica,
                                         r->settings_.advertise, r->settings_.lease_ttl_s});
  if (!election) return std::unexpected(election.error());
  r->election_ = std::move(*election);
  if (r->settings_.warm_sync_ms > 0) {
    r->warm_ = std::make_shared<store::WarmRows>(
        r->client_, store::domain_prefix(r->topology_.domain), r->store_key_, store::kPageKeys);
    r->warmer_ = std::thread([raw = r.get()] { raw->warm_loop(); });
  }
  return r;
}

void Replica::warm_loop() {
  auto log = common::logger("detwan-agent");
  bool failing = false;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const bool following = term_ == nullptr && !election_->term().has_value();
    lock.unlock();
    if (following) {
      auto synced = warm_->sync();
      if (!synced) {
        warm_failures_.fetch_add(1);
        if (!failing) {
          log->warn(
              "replica {}: warm copy not synced: {} (retried; an elected replica reads "
              "what it lacks)",
              settings_.replica, synced.error().message);
        }
      } else if (synced->full) {
        log->info("replica {}: warm copy read whole: {} rows", settings_.replica, warm_->rows());
      }
      failing = !synced;
    }
    lock.lock();
    warm_wake_.wait_for(lock, std::chrono::milliseconds(settings_.warm_sync_ms),
                        [this] { return stopping_; });
  }
}

void Replica::stop_warming() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  warm_wake_.notify_all();
  if (warmer_.joinable()) warmer_.join();
}

std::shared_ptr<Replica::Term> Replica::current() const {
  std::lock_guard lock(mutex_);
  return term_;
}

bool Replica::leading() const { return current() != nullptr; }

void Replica::retire(std::shared_ptr<Term> term) {
  std::lock_guard lock(mutex_);
  retired_.push_back(std::move(term));
}

void Replica::poll() {
  auto log = common::logger("detwan-agent");
  std::vector<std::shared_ptr<Term>> retired;
  {
    std::lock_guard lock(mutex_);
    retired.swap(retired_);
  }
  retired.clear();  // a term closed while requests were in it ends here, on this thread
  const std::optional<store::Fence> fence = election_->term();
  std::shared_ptr<Term> term = current();
  if (term && (!fence || fence->create_revision != term->create_revision)) {
    log->warn("replica {}: term {} over: closing the agent", settings_.replica,
              term->create_revision);
    {
      std::lock_guard lock(mutex_);
      term_.reset();
    }
    term.reset();
    return;
  }
  if (term && term->store->uncertain()) {
    log->warn(
        "replica {}: a write's outcome is unknown (etcd stopped answering): resigning, "
        "the next leader reads the true state",
        settings_.replica);
    {
      std::lock_guard lock(mutex_);
      term_.reset();
    }
    term.reset();
    election_->resign();
    return;
  }
  if (!term && fence && fence->create_revision != failed_term_) open_term(*fence);
}

void Replica::open_term(const store::Fence& fence) {
  auto log = common::logger("detwan-agent");
  auto term = std::make_shared<Term>();
  term->create_revision = fence.create_revision;
  term->gateways = std::make_unique<FencedGatewayClient>(*election_);
  store::EtcdStoreOptions store_options{topology_.domain, store_key_, fence};
  store_options.warm = warm_;
  auto opened = store::EtcdStore::open(client_, std::move(store_options), description_);
  common::Result<void> ok;
  if (opened) {
    term->store = std::move(*opened);
    agent::AgentOptions options;
    options.gateway_client = term->gateways.get();
    options.store = term->store;
    auto agent = agent::Agent::open(topology_, options);
    if (agent) {
      term->agent = std::move(*agent);
      auto routes = make_routes_(*term->agent);
      if (routes) {
        term->routes = std::move(*routes);
      } else {
        ok = std::unexpected(routes.error());
      }
    } else {
      ok = std::unexpected(agent.error());
    }
  } else {
    ok = std::unexpected(opened.error());
  }
  if (!ok) {
    log->error("replica {}: elected (term {}) but cannot serve: {}; resigning", settings_.replica,
               fence.create_revision, ok.error().message);
    failed_term_ = fence.create_revision;
    term.reset();
    election_->resign();
    return;
  }
  if (const auto& warm = term->store->warm_sync(); warm) {
    log->info("replica {}: leading term {} over {} (warm copy: {} rows read, {} gone, of {})",
              settings_.replica, fence.create_revision, description_, warm->read, warm->dropped,
              warm->listed);
  } else {
    log->info("replica {}: leading term {} over {}", settings_.replica, fence.create_revision,
              description_);
  }
  std::lock_guard lock(mutex_);
  term_ = std::move(term);
}

ReplicaState Replica::state(bool leading) const {
  ReplicaState state;
  state.replica = settings_.replica;
  state.leading = leading;
  state.warm_rows = warm_ ? warm_->rows() : 0;
  state.counters.terms_won = election_->terms_won();
  state.counters.terms_lost = election_->terms_lost();
  state.counters.warm_syncs = warm_ ? warm_->syncs() : 0;
  state.counters.warm_sync_failures = warm_failures_.load();
  return state;
}

std::string Replica::metrics_text(bool leading) const {
  return replica_metrics_text(state(leading));
}

void Replica::follower_answer(const api::HttpRequest& request, const api::Respond& respond) const {
  const std::optional<store::LeaderInfo> leader = election_->leader();
  if (request.method == "GET" && request.path == "/healthz") {
    respond(
        api::HttpResponse{200,
                          json::serialize(json::object{{"status", "ok"},
                                                       {"role", "follower"},
                                                       {"replica", settings_.replica},
                                                       {"leader", leader_json(leader)},
                                                       {"store", description_},
                                                       {"election", replica_json(state(false))}}),
                          "application/json",
                          {}});
    return;
  }
  if (request.method == "GET" && request.path == "/metrics") {
    respond(api::HttpResponse{200, metrics_text(false), "text/plain; version=0.0.4", {}});
    return;
  }
  const std::string url = leader ? leader->url : "";
  const std::string message =
      leader ? fmt::format("replica {} is a follower; the leader is {} at {}", settings_.replica,
                           leader->replica, leader->url)
             : fmt::format("replica {} is a follower and no leader is elected yet; retry",
                           settings_.replica);
  respond(api::HttpResponse{
      503,
      json::serialize(json::object{
          {"error", json::object{{"code", "not_leader"}, {"message", message}, {"leader", url}}}}),
      "application/json",
      {{"Retry-After", "1"}}});
}

api::Handler Replica::handler() {
  return [this](api::HttpRequest request, api::Respond respond) {
    std::shared_ptr<Term> term = current();
    // A leader whose lease is not certainly alive (paused and continued, cut off from etcd)
    // answers as a follower until the election settles: no read from a state that another
    // leader may have moved past, no write that the fence would refuse anyway.
    if (!term || !election_->leading_now()) {
      follower_answer(request, respond);
      return;
    }
    if (request.method == "GET" && request.path == "/healthz") {
      respond = [this, respond, keep = term, replica = settings_.replica,
                 url = settings_.advertise](api::HttpResponse response) mutable {
        boost::system::error_code ec;
        json::value body = json::parse(response.body, ec);
        if (!ec && body.is_object()) {
          body.as_object()["role"] = "leader";
          body.as_object()["replica"] = replica;
          body.as_object()["leader"] = json::object{{"replica", replica}, {"url", url}};
          body.as_object()["election"] = replica_json(state(true));
          response.body = json::serialize(body);
        }
        respond(std::move(response));
        retire(std::move(keep));
      };
    } else if (request.method == "GET" && request.path == "/metrics") {
      respond = [this, respond, keep = term](api::HttpResponse response) mutable {
        if (response.status == 200) response.body += metrics_text(true);
        respond(std::move(response));
        retire(std::move(keep));
      };
    } else {
      // The term stays open until the answer is sent (a provisioning wait included); the last
      // reference is then dropped by poll(), never on one of the agent's own threads.
      respond = [this, respond, keep = term](api::HttpResponse response) mutable {
        respond(std::move(response));
        retire(std::move(keep));
      };
    }
    term->routes.routes(std::move(request), std::move(respond));
  };
}

}  // namespace detwan::control::daemon
