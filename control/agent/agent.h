#pragma once
// detwan-agent's core: the reservations of one administrative domain, their admission,
// journal and gateway programming (docs/control.md). The HTTP API (control/api/) is a thin
// layer over these calls.
//
// Every operation either applies whole (journaled before it returns) or changes nothing and
// returns an ApiError naming the cause. Reservations are identified by "r-<n>".
//
// Threading: every public function is thread-safe (one lock; journal writes happen under it, so
// operations are serialised: of two requests racing for the last capacity exactly one is
// admitted). Two internal threads: the timer (hold expiry, start/end of reservations) and the
// gateway reconciler. Callbacks given to when_active() run without the lock, on the timer or
// reconciler thread, or on the caller's thread if the answer is immediate.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "control/compute/placement.h"
#include "control/compute/pool.h"
#include "control/gateway/reconciler.h"
#include "control/journal/store.h"
#include "control/model/topology.h"
#include "control/reservation/reservation.h"

namespace detwan::control::agent {

struct ApiError {
  int status = 400;     // HTTP status: 400 bad request, 404, 409 conflict, 422 cannot be met, 503
  std::string code;     // stable: "invalid_field", "no_capacity", "latency_below_propagation", ...
  std::string message;  // names the field, link or figure at fault
  std::string field;    // request field concerned ("" if none)
  [[nodiscard]] boost::json::object to_json() const;
};

template <typename T>
using Outcome = std::expected<T, ApiError>;

struct ReserveRequest {
  reservation::Spec spec;  // start/end resolved by the parser (asap: duration only)
  bool start_now = false;  // no start given: starts when reserved
  std::string client_request_id;
  int64_t hold_timeout_ns = 0;  // 0: the agent's default
  bool commit = false;
  bool provision = false;   // implies commit
  std::string fingerprint;  // canonical form of the request (idempotency)
  // Who asks (from the API's Identity): the tenant a token acts for ("" = the domain's own
  // operator), or the foreign domain whose agent asks for a segment (federation, "" = local).
  // Owner policy (caps per tenant / foreign domain) is checked against them.
  std::string tenant;
  std::string requester_domain;
  // Federation: the cross-domain tunnel's id, chosen by the aggregator (0 = the agent picks one
  // of its own). 409 "tunnel_id_taken" when a live reservation of ours uses it.
  uint32_t tunnel_id = 0;
};

struct ModifyRequest {
  std::optional<uint64_t> min_bandwidth_bps;
  std::optional<int64_t> end_ns;
  std::string client_request_id;
  std::string fingerprint;
};

struct PathsRequest {
  std::string src;
  std::string dst;
  uint64_t min_bandwidth_bps = 0;
  uint64_t max_burst_bytes = 0;
  int64_t max_latency_ns = 0;
  int64_t max_latency_variation_ns = -1;
  double max_loss = 1.0;
  int64_t start_ns = 0;  // 0: now
  int64_t duration_ns = 3'600'000'000'000;
  uint32_t k = 1;
  bool require_capacity = true;
};

// A job to place (POST /v1/plan): where to run it, with which WAN reservations.
struct PlanRequest {
  compute::Job job;
  // One step's compute on one rank: the same for every pool kind, per kind, or (neither) each
  // pool's measured reference step scaled by gradient_bytes / its reference gradient.
  int64_t step_compute_ns = 0;
  std::map<std::string, int64_t> step_compute_ns_by_kind;
  std::vector<std::string> sites;  // only these sites (empty: any)
  int64_t start_ns = 0;            // 0: now
  int64_t duration_ns = 3'600'000'000'000;
  bool reserve = false;            // hold the reservations the plan needs
  std::string client_request_id;   // with reserve: "<id>-<n>" for the n-th reservation
  std::string tenant;              // with reserve: who holds them (ReserveRequest::tenant)
};

struct AgentOptions {
  const common::Clock* realtime = nullptr;   // Unix ns for schedules (default: CLOCK_REALTIME)
  const common::Clock* monotonic = nullptr;  // timeouts (default: CLOCK_MONOTONIC)
  gateway::GatewayClient* gateway_client = nullptr;  // default: Unix sockets
  bool start_threads = true;  // false: tests call tick() and reconcile() themselves
  // Where the state is kept (journal/store.h); default: the SQLite journal agent.journal names.
  // A replica on etcd passes its EtcdStore, fenced by its term (docs/control.md).
  std::shared_ptr<journal::Store> store;
};

class Agent {
 public:
  static common::Result<std::unique_ptr<Agent>> open(model::Topology topology,
                                                     AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Reservations (docs/control-api.md). Each returns the reservation's JSON after the change.
  Outcome<boost::json::object> reserve(const ReserveRequest& request);
  Outcome<boost::json::object> commit(const std::string& id);
  Outcome<boost::json::object> abort(const std::string& id);
  Outcome<boost::json::object> provision(const std::string& id);
  Outcome<boost::json::object> release(const std::string& id);
  Outcome<boost::json::object> terminate(const std::string& id);
  // A new key for an encrypted reservation, replaced on both gateways without a lost packet
  // (tunnel_keys.h); 409 if it is not encrypted or a rotation is under way.
  Outcome<boost::json::object> rotate_key(const std::string& id);
  // A paced rotation (a federated end segment's, docs/federation.md "Rotation across domains")
  // may go on to `step` (switching or dropping) once this end has the step before it in place;
  // dropping restarts the grace before the old key goes. 409 not_paced / no rotation under way.
  Outcome<boost::json::object> permit_rotation(const std::string& id,
                                               reservation::KeyRotation step);
  Outcome<boost::json::object> modify(const std::string& id, const ModifyRequest& request);
  Outcome<boost::json::object> get(const std::string& id) const;
  boost::json::array list(std::optional<reservation::State> state) const;
  // One page of the reservations in id order (GET /v1/reservations?state=&site=&after=&limit=):
  // those after `after_key` that match the filters, at most `limit` (0: all); `next` is the
  // last id of a full page ("" when nothing follows).
  struct ListQuery {
    std::optional<reservation::State> state;
    std::string site;                                   // src or dst; "" = any
    std::function<bool(const std::string&)> visible;    // by tenant; null = all
    uint64_t after_key = 0;
    size_t limit = 0;
    bool archived = false;  // the store's archive instead of the hot state
  };
  struct ListPage {
    boost::json::array reservations;
    std::string next;
    std::optional<ApiError> error;  // the archive could not be read
  };
  ListPage list_page(const ListQuery& query) const;

  // Compute pools (control/compute/pool.h): register (create or replace), read, remove.
  Outcome<boost::json::object> register_pool(compute::Pool pool);
  Outcome<boost::json::object> pool(const std::string& name) const;
  boost::json::array pools() const;
  Outcome<boost::json::object> remove_pool(const std::string& name);
  // Co-scheduling (control/compute/placement.h): sites, ranks per site, the reservations and
  // the predicted step time, or 422 with the cause. With request.reserve, the reservations are
  // held (commit them, or they expire after the hold timeout).
  Outcome<boost::json::object> plan(const PlanRequest& request);

  // Planning: candidate paths and their bounds, nothing booked.
  Outcome<boost::json::object> paths(const PathsRequest& request) const;
  boost::json::object topology_json() const;
  boost::json::object health() const;
  std::string metrics_text() const;  // Prometheus text exposition format
  // GET /v1/stats: the counters of metrics_text() as JSON, from the same lists
  // (agent_counters.h): counters, per-gateway reconciler counters, latency summaries.
  boost::json::object stats() const;

  // ---- The operator console's reads (agent_console.cc, docs/console.md) ----
  // Every gateway as the reconciler last saw it: reachable, in sync, generation, boot id, last
  // error, tunnels desired / in place / refused, the reconciler's counters, age of the report.
  boost::json::object gateways_json() const;
  // Gateway `name`'s tunnels with live counters and delay summaries (one-way WAN delay,
  // delay at release, lateness), from its {"cmd":"stats"} through the admin socket with a
  // short timeout, cached kGatewayStatsMaxAgeNs (concurrent callers share one fetch). A
  // gateway that does not answer is {"reachable": false, "error": ...}; 404 for an unknown name.
  // Blocks for at most the gateway's timeout; never under the agent's lock.
  Outcome<boost::json::object> gateway_tunnels(const std::string& name);
  // Each link direction's reserved rate over [now, now + horizon_ns) in steps of step_ns (the
  // most reserved at any instant of each step), with the link's reservable rate. 400 if the
  // horizon or step is out of range (step >= 1 s, at most 1000 steps, horizon <= 7 days).
  Outcome<boost::json::object> link_calendar(int64_t horizon_ns, int64_t step_ns) const;

  // Calls `done` with the reservation's JSON once its dataplane is active (every gateway has
  // its tunnel as planned), or at `timeout_ns` with whatever it is then.
  void when_active(const std::string& id, int64_t timeout_ns,
                   std::function<void(boost::json::object)> done);

  // Timer work (hold expiry, start and end times); the timer thread calls it.
  void tick();
  // One reconciliation pass over every gateway on the calling thread (tests).
  void reconcile_now();
  // The ledger's own consistency check ("" if nothing is over-booked).
  [[nodiscard]] std::string check_ledger() const;
  [[nodiscard]] const model::Topology& topology() const;

  // ---- Federation (agent_federation.cc, docs/federation.md) ----
  // The domain's abstract view: borders, sites, transits with latency bounds and capacity
  // over the next 24 h; no internal node, link, gateway or port name.
  boost::json::object federation_view() const;
  // A segment of a federated reservation asked by another domain's agent (or by our own
  // coordinator): reserve() with the given tunnel id, then the federation data (aggregate,
  // remote gateways, requester) journaled beside it. Answers the segment's JSON.
  Outcome<boost::json::object> reserve_segment(const ReserveRequest& request,
                                               boost::json::object federation);
  // Stores what the commit says (far gateway, far prefixes, composed bound), then commit().
  Outcome<boost::json::object> commit_segment(const std::string& id,
                                              boost::json::object commit_info);
  // The segment's JSON: id, state, reason, hold_expires_unix_ns, bound, gateways, public_keys,
  // prefixes, tunnel_id, requester_domain, dataplane_active.
  Outcome<boost::json::object> segment(const std::string& id) const;
  // The reservation a client_request_id made ("" if none).
  std::string reservation_of_request(const std::string& client_request_id) const;
  // The domain that asked for segment `id` ("" if it is not a segment).
  std::string segment_requester(const std::string& id) const;
  // A new reservation id "r-<n>" in this agent's namespace (for a federated reservation), its
  // key journaled as used with the first write of `body` under (kind, id).
  Outcome<std::string> new_federated_id(const std::string& kind, const std::string& body);
  // Journals one federation row (kind "aggregate" or "segment"): committed on return.
  Outcome<void> journal_federation(const std::string& kind, const std::string& id,
                                   const std::string& body);
  std::vector<std::pair<std::string, std::string>> federation_rows(const std::string& kind) const;

  // Counted by the API layer, reported in metrics_text().
  void count_request(const std::string& method, const std::string& route, int status,
                     int64_t latency_ns);
  // A request the API refused (cause "forbidden": its identity may not do it), reported with
  // the admission refusals in metrics_text() (decision="refused",cause=...).
  void count_refused(const std::string& cause);

  struct Impl;

 private:
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `detwan-agent journal check`: replays a journal's events into a fresh ledger for `topology`
// and verifies that at no point any link direction was booked above its reservable rate and no
// gateway slot was booked twice at once. Returns a summary line; errors name the event.
common::Result<std::string> check_journal(const model::Topology& topology, const std::string& path);
// The same over any store (an etcd domain's events: `journal-check --store etcd://...`).
common::Result<std::string> check_store(const model::Topology& topology, journal::Store& store);

}  // namespace detwan::control::agent
