#pragma once
// The aggregator of federated reservations (docs/federation.md, "Reservations across
// domains"): a reservation whose src or dst site is not this domain's is split into one segment
// per domain along the path of least worst-case latency through the domains' abstract views,
// reserved in two phases (hold every segment, compose and check the bound, then commit every
// segment), and its later operations propagate to every segment. Every step is journaled (the
// agent's journal, table `federation`, kind "aggregate") before the call it leads to and before
// the client is answered; on open, the reservations a restart interrupted are recovered
// (reserving: every segment aborted, `terminated` reason `aggregator_restart`; committing:
// commits re-sent, or every segment terminated and `failed`). A background loop (tick) retries
// the aborts and terminations a peer did not answer and expires holds.
//
// Threading: every public function is thread-safe; federated operations are serialised by one
// lock, held across the calls to peers (each bounded by federation.call_timeout). The own
// domain's segment is handled in-process (segments.h), never over HTTP.
// Errors: the Agent's ApiError; a segment's refusal keeps the peer's status and code, its
// message is "domain <d>: ..." and the error object carries "domain": "<d>"; an unreachable
// peer is 502 "peer_unreachable", a timeout 504 "peer_timeout"; an answer that is not what the
// protocol says (not a JSON object, a field missing or of another type) is 502 "peer_protocol"
// naming the domain and the field, counted, and handled like a call that failed (what was held
// is aborted, a failed commit compensated). No peer's JSON and no journal row throws out of
// here; an unreadable journal row is skipped at open (logged, counted).
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "common/clock.h"
#include "control/agent/agent.h"
#include "control/federation/peer_client.h"
#include "control/federation/view.h"

namespace detwan::control::federation {

struct CoordinatorOptions {
  const common::Clock* realtime = nullptr;  // default: CLOCK_REALTIME (must be the agent's)
  PeerClient* client = nullptr;             // default: HttpPeerClient from the topology
  bool start_threads = true;                // false: tests call tick()
  int64_t view_max_age_ns = 5'000'000'000;  // peers' views are refetched when older
  uint32_t tunnel_id_attempts = 4;          // reserve retries on 409 tunnel_id_taken
  // Draws a tunnel id in federation.tunnel_ids (tests); default: the CSPRNG, uniform.
  std::function<uint32_t()> draw_tunnel_id;
};

struct SegmentRecord {
  std::string domain;
  std::string from;
  std::string to;
  std::string client_request_id;
  std::string id;  // at that domain ("" until it answered)
  std::string state = "planned";
  int64_t hold_expires_ns = 0;
  boost::json::object bound;  // as the domain answered
  boost::json::array gateways;
  boost::json::object public_keys;
  boost::json::array prefixes;
  std::string error;
  bool cleanup = false;  // an abort/terminate this segment still needs (retried by tick)
};

struct Aggregate {
  std::string id;
  std::string client_request_id;
  std::string fingerprint;
  std::string state;     // reserving, held, committing, committed, provisioned, released,
                         // terminated, failed
  std::string decision;  // "" or "commit"
  std::string reason;
  boost::json::object request;  // src, dst, rate, window, requirements, prefixes, encrypt
  uint32_t tunnel_id = 0;
  uint64_t burst_bytes = 0;
  int64_t hold_expires_ns = 0;
  boost::json::object bound;
  std::vector<SegmentRecord> segments;
  // Key rotation across domains, stepped by tick() (docs/federation.md, "Rotation across
  // domains"): "" (none), adding, switching, switched (every end seals with the new key; the
  // grace runs), dropping. `rotations` counts completed ones (every end's count, once done).
  std::string rotation;
  int64_t rotation_step_ns = 0;
  uint64_t rotations = 0;
  int64_t created_ns = 0;
  int64_t updated_ns = 0;
};

// Terminated or failed (an aggregate's or a segment's state): nothing more happens to it.
inline bool is_final(const std::string& state) {
  return state == "terminated" || state == "failed";
}

// The journal's form (with the request's fingerprint) and the API's (without).
boost::json::object to_json(const Aggregate& a);
boost::json::object api_json(const Aggregate& a);
agent::ApiError not_found(const std::string& id);
common::Result<Aggregate> aggregate_from_json(const boost::json::object& o);

struct CoordinatorCounters {
  std::map<std::string, uint64_t> peer_protocol_errors;  // malformed answers, by domain
  uint64_t journal_rows_skipped = 0;                     // unreadable aggregate rows at open
};

class Coordinator {
 public:
  // Loads the journaled federated reservations and recovers interrupted ones (calls peers).
  static common::Result<std::unique_ptr<Coordinator>> open(agent::Agent& agent,
                                                           CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Does this request leave the domain (a site that is not ours)?
  [[nodiscard]] bool is_federated(const agent::ReserveRequest& request) const;
  [[nodiscard]] bool owns(const std::string& id) const;
  // The tenant that holds aggregate `id` ("" = none named: the owner's, or no such aggregate).
  [[nodiscard]] std::string tenant_of(const std::string& id) const;

  agent::Outcome<boost::json::object> reserve(const agent::ReserveRequest& request);
  agent::Outcome<boost::json::object> commit(const std::string& id);
  agent::Outcome<boost::json::object> abort(const std::string& id);
  agent::Outcome<boost::json::object> provision(const std::string& id);
  // GET `id` once every domain reports its dataplane active, or once agent.provision_wait
  // passed (then as it stands).
  agent::Outcome<boost::json::object> wait_active(const std::string& id);
  agent::Outcome<boost::json::object> release(const std::string& id);
  agent::Outcome<boost::json::object> terminate(const std::string& id);
  agent::Outcome<boost::json::object> rotate_key(const std::string& id);
  agent::Outcome<boost::json::object> modify(const std::string& id,
                                             const agent::ModifyRequest& request);
  // Refreshes the segments' states from their domains.
  agent::Outcome<boost::json::object> get(const std::string& id);
  boost::json::array list() const;
  // Co-scheduling across domains (POST /v1/plan?federated=true): placement over every domain's
  // pools (from the views; compute time from the request), WAN from the domain paths; with
  // request.reserve the reservations are held through reserve() (or the agent's, between two
  // of our sites).
  agent::Outcome<boost::json::object> plan(const agent::PlanRequest& request);

  // Hold expiry and the retries of unanswered aborts/terminates.
  void tick();
  FaultInjector& faults() { return faults_; }
  CoordinatorCounters counters() const;

 private:
  Coordinator(agent::Agent& agent, CoordinatorOptions options);
  agent::Outcome<boost::json::object> reserve_and_commit(const agent::ReserveRequest& request);
  PeerAnswer call(const std::string& domain, const std::string& method, const std::string& path,
                  const boost::json::object* body);
  struct CallSpec {
    std::string domain;
    std::string method;
    std::string path;
    std::optional<boost::json::object> body;
  };
  // The calls at once (a thread each but the first), answers in their order; each bounded by
  // call_timeout as call() is.
  std::vector<PeerAnswer> call_all(const std::vector<CallSpec>& calls);
  agent::ApiError peer_error(const std::string& domain, const PeerAnswer& answer) const;
  // A peer's answer against the protocol (coordinator_calls.cc): counted, logged, 502
  // "peer_protocol" "domain <d>: answer field '<field>' <why>".
  agent::ApiError protocol_error(const std::string& domain, const std::string& field,
                                 const std::string& why);
  // The problem with a 2xx answer to a segment request (nullopt: none).
  std::optional<agent::ApiError> check_hold_answer(const std::string& domain,
                                                   const PeerAnswer& answer);
  // The segment's state in a 200 answer to a call on it, or the protocol error.
  agent::Outcome<std::string> answer_state(const std::string& domain, const PeerAnswer& answer);
  agent::Outcome<void> save(Aggregate& a);
  // Our view and every peer's (cached for view_max_age; `refresh`: fetched again), fetched at
  // once; `looked_at` names the domains and the views that could not be had. Peers in
  // `failed` are not asked; those whose fetch timed out are added to it.
  agent::Outcome<std::vector<ParsedView>> views(bool refresh, std::string* looked_at,
                                                std::map<std::string, std::string>* failed =
                                                    nullptr);
  // One attempt of phase 1 with `tunnel_id`; on failure every held segment is released.
  agent::Outcome<void> hold_segments(Aggregate& a);
  agent::Outcome<void> commit_segments(Aggregate& a);
  void compose(Aggregate& a);
  // abort (held) or terminate a segment, looking it up by client_request_id if needed; true
  // once the domain answered that it holds nothing for it. `unanswered` (if given) is set when
  // the domain did not answer at all (unreachable, timed out). Thread-compatible per segment:
  // tick() runs it on copies, outside mutex_.
  bool release_segment(SegmentRecord& s, bool* unanswered = nullptr);
  // Releases every segment but those `deferred` (by index: their domain did not answer the
  // call just made), which are marked cleanup and left to tick(): the requester is answered
  // after one call timeout, not two, and the retry does not hold mutex_ while it waits.
  void release_all(Aggregate& a, const std::vector<bool>& deferred = {});
  agent::Outcome<boost::json::object> propagate(const std::string& id, const std::string& action,
                                                const std::string& target_state);
  // One step of a rotation under way, when every end segment has the previous one in place.
  void step_rotation(Aggregate& a, int64_t now_ns);
  void recover();
  void run_loop();
  Aggregate* find(const std::string& id);

  agent::Agent& agent_;
  CoordinatorOptions options_;
  common::RealtimeClock own_realtime_;
  std::unique_ptr<PeerClient> own_client_;
  FaultInjector faults_;
  std::string domain_;

  mutable std::mutex mutex_;
  std::map<std::string, Aggregate> aggregates_;     // by id
  std::map<std::string, std::string> by_request_;   // client_request_id -> id
  std::map<std::string, ParsedView> view_cache_;    // by domain
  std::map<std::string, int64_t> view_fetched_ns_;  // realtime of each fetch
  mutable std::mutex counters_mutex_;  // counters_ (bumped by calls made outside mutex_)
  CoordinatorCounters counters_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread loop_;
};

}  // namespace detwan::control::federation
