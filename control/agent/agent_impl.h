#pragma once
// Private state of control::agent::Agent, shared by agent*.cc. Everything below `mutex` is
// guarded by it.
#include <array>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/histogram.h"
#include "control/agent/agent.h"
#include "control/calendar/ledger.h"
#include "control/gateway/reconciler.h"
#include "control/journal/journal.h"

namespace detwan::control::agent {

struct Waiter {
  std::string id;
  int64_t deadline_ns = 0;  // monotonic
  std::function<void(boost::json::object)> done;
};

// Time between both gateways sealing with a new key and the old key's removal (plus the
// reservation's latency bound): packets sealed just before the switch still open.
inline constexpr int64_t kKeyDropGraceNs = 1'000'000'000;

struct GatewayView {
  bool reachable = false;
  std::string error;
  std::string boot_id;
  uint64_t generation = 0;
  uint64_t desired_version = 0;  // the reconciler's version of our last set_desired
  uint64_t reported_version = 0;
  std::set<uint32_t> in_place;
  std::map<uint32_t, std::string> refused;
  int64_t last_report_ns = 0;  // monotonic; 0 = never
};

struct Counters {
  std::map<std::string, uint64_t> admitted;     // by "reserve"/"modify"
  std::map<std::string, uint64_t> refused;      // by cause
  std::map<std::string, uint64_t> transitions;  // by target state
  std::map<std::string, uint64_t> requests;     // "method route status"
  common::LogLinearHistogram admission_ns;      // time to plan one request
  common::LogLinearHistogram request_ns;        // API handling time
  uint64_t journal_failures = 0;
  uint64_t archived = 0;  // reservations moved to the store's archive by this process
};

// Callbacks to run once the lock is released.
using Deferred =
    std::vector<std::pair<std::function<void(boost::json::object)>, boost::json::object>>;

// A segment's far end, from the aggregator's commit (docs/federation.md, "The reconciler for a
// foreign far end"): the tunnel on our gateway reaches a gateway of another domain.
struct FederatedEnd {
  std::string far_gateway;                // the far gateway's name, in its domain
  std::vector<std::string> far_prefixes;  // the far site's prefixes (our match_dst)
  int64_t playout_bound_ns = 0;           // the composed bound's B (0: in time)
  std::string far_public_key;             // the far gateway's X25519 key (base64, "" = none)
  std::string key_context;                // "f-<aggregate id>/<aggregator domain>": both ends'
};

// The last stats a gateway answered, summarised for the console (agent_console.cc): at most one
// fetch per gateway per kGatewayStatsMaxAgeNs, however many clients ask.
inline constexpr int64_t kGatewayStatsMaxAgeNs = 1'000'000'000;
inline constexpr int kGatewayStatsTimeoutMs = 500;
struct GatewayStatsCache {
  std::mutex fetching;  // held while one caller asks the gateway; the others wait for its answer
  std::mutex mutex;     // guards the fields below
  int64_t fetched_mono_ns = 0;  // 0 = never
  int64_t fetched_unix_ns = 0;
  bool reachable = false;
  std::string error;
  boost::json::array tunnels;  // the summaries, before reservation ids are added
};

struct Agent::Impl {
  model::Topology topology;
  AgentOptions options;
  common::RealtimeClock own_realtime;
  common::MonotonicClock own_monotonic;
  gateway::UnixGatewayClient own_client;
  gateway::UnixGatewayClient stats_client{kGatewayStatsTimeoutMs};  // console reads, short wait
  const common::Clock* realtime = nullptr;
  const common::Clock* monotonic = nullptr;
  std::string owner;  // "agent:<name>"

  mutable std::mutex mutex;
  std::shared_ptr<journal::Store> journal;  // SQLite or etcd (journal/store.h)
  std::unique_ptr<calendar::Ledger> ledger;
  std::map<uint64_t, reservation::Reservation> reservations;  // by key
  // The keys of the reservations that hold resources, by site pair (the lesser name first):
  // what prefix_conflict compares a request with, without a scan of every reservation.
  std::map<std::pair<std::string, std::string>, std::set<uint64_t>> holding_by_pair;
  void index_holding(const reservation::Reservation& r);
  std::map<std::string, journal::RequestRecord> requests;     // by client_request_id
  std::map<std::string, compute::Pool> pools;                 // by name
  std::map<std::string, FederatedEnd> federated_ends;         // committed segments, by id
  uint64_t next_key = 1;
  uint32_t next_tunnel_id = 0;
  std::set<uint32_t> tunnel_ids_in_use;  // of reservations that are not terminated or failed
  std::vector<GatewayView> gateways;
  std::vector<Waiter> waiters;
  Counters counters;

  // One per gateway, made at open (the caches have their own locks, not `mutex`).
  std::vector<std::unique_ptr<GatewayStatsCache>> stats_cache;

  std::unique_ptr<gateway::Reconciler> reconciler;
  std::condition_variable timer_wake;
  bool stopping = false;
  std::thread timer;

  // ---- under the lock (agent.cc) ----
  reservation::Reservation* find(const std::string& id);
  const reservation::Reservation* find(const std::string& id) const;
  // Journals the transition of `next` (a modified copy of the stored reservation, or a new one)
  // and only then stores it and rebooks the ledger. from = "" for a creation.
  Outcome<void> commit_transition(reservation::Reservation next, const std::string& from,
                                  const std::string& reason, const journal::RequestRecord* request);
  // Recomputes every gateway's desired tunnels and the dataplane flags, and moves key
  // rotations on (advance_key_rotations).
  void update_desired(int64_t now_ns);
  void advance_key_rotations(int64_t now_ns);
  // Every gateway of r's tunnel reports its current desired state (and so the rotation's
  // current step) in place.
  bool rotation_step_in_place(const reservation::Reservation& r) const;
  // Reservation JSON with its dataplane status.
  boost::json::object view(const reservation::Reservation& r) const;
  void collect_waiters(int64_t now_mono_ns, bool expire_all, Deferred* out);
  uint32_t allocate_tunnel_id();
  void on_report(const gateway::GatewayReport& report);
  void expire(int64_t now_ns);
  int64_t next_deadline_ns() const;  // realtime, INT64_MAX if none
  void run_timer();
  // ---- archive (agent_archive.cc) ----
  int64_t next_archive_mono_ns = 0;
  // Moves reservations final for agent.archive_after out of memory into the store's archive
  // (at most once every 10 s, kArchiveBatch at a time).
  void archive_old(int64_t now_ns);
  // An archived reservation by id (nullopt: none; an error: the store failed).
  Outcome<std::optional<reservation::Reservation>> archived(const std::string& id) const;
  // A page of the archive, filtered like the hot list (at most 10,000 without a limit).
  Agent::ListPage list_archived(const Agent::ListQuery& query) const;
  // view() of an archived reservation, marked "archived": true.
  boost::json::object archived_view(const reservation::Reservation& r) const;
  // The error for an id that is not in memory: 404, or 409 when it is archived (read-only).
  ApiError missing(const std::string& id, std::string_view operation) const;
  // ---- federation (agent_federation.cc) ----
  void load_federated_ends();
  // A committed segment's tunnel on our gateway toward another domain's: the peer whose
  // `remote:` is the far gateway, the far site's prefixes, the composed playout bound.
  void apply_federated_end(const reservation::Reservation& r, const std::string& port,
                           gateway::TunnelSpec* spec) const;
};

ApiError not_found(const std::string& id);
// 409: an archived reservation is read-only (agent_archive.cc).
ApiError archived_read_only(const reservation::Reservation& r, std::string_view operation);
// "r-<digits>" -> its key (nullopt for anything else, or past 2^64).
std::optional<uint64_t> key_of_id(const std::string& id);
ApiError wrong_state(const reservation::Reservation& r, std::string_view operation,
                     std::string_view allowed);

}  // namespace detwan::control::agent
