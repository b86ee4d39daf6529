#pragma once
// One replica of an agent on etcd (docs/control.md, "The agent on etcd"): `detwan-agent run
// --store etcd://...`. Every replica serves HTTP; the one the election makes leader opens an
// Agent over the fenced EtcdStore (its whole state read from etcd) and serves the API with it,
// the others answer /healthz (role, leader) and /metrics, and every other request with 503
// not_leader naming the leader's URL (Retry-After: 1): clients given the replica set
// (detwanctl --agent URL1,URL2,...) move on to the next URL.
//
// A term ends when the election says so (lease lost, resigned) or when the store is uncertain
// of a write's outcome: the Agent is closed (requests already in it finish against it; its
// writes then fail, fenced) and the replica stands again. Gateways are programmed only while
// the lease is certainly alive (LeaderElection::leading_now), through a fenced gateway client.
//
// A follower keeps a warm copy of the state (store/warm_rows.h), synced every warm_sync_ms on a
// thread of its own, so that an elected replica reads what changed since, not everything.
//
// Threading: handler() may be called from any thread; poll() from one (the daemon's loop).
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "control/agent/agent.h"
#include "control/api/http_server.h"
#include "control/daemon/replica_metrics.h"
#include "control/model/topology.h"
#include "control/store/etcd_store.h"
#include "control/store/leader_election.h"
#include "control/store/warm_rows.h"

namespace detwan::control::daemon {

struct ReplicaSettings {
  std::string store;           // "etcd://HOST:PORT,..."
  std::string store_key_file;  // 32 bytes, the same on every replica
  std::string replica;         // this replica's name
  std::string advertise;       // this replica's API URL, as clients reach it
  int64_t lease_ttl_s = 5;
  // A follower brings its warm copy of the state (store/warm_rows.h) up to date this often, so
  // that once elected it reads only what changed; 0: no copy (an elected replica reads all).
  int64_t warm_sync_ms = 1000;
};

// Builds what a leader serves over its agent (the daemon's routes, federation included); the
// returned closer runs when the term ends, before the agent is closed.
struct LeaderRoutes {
  api::Handler routes;
  std::function<void()> close;
};
using MakeRoutes = std::function<common::Result<LeaderRoutes>(agent::Agent&)>;

class Replica {
 public:
  // Contacts etcd (checks the domain and the store key) and starts standing for election.
  static common::Result<std::unique_ptr<Replica>> start(model::Topology topology,
                                                        ReplicaSettings settings,
                                                        MakeRoutes make_routes);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  [[nodiscard]] api::Handler handler();
  // Opens or closes the term as the election and the store say. Called every ~50 ms.
  void poll();
  [[nodiscard]] bool leading() const;
  [[nodiscard]] const std::string& description() const { return description_; }

 private:
  struct Term;
  Replica(model::Topology topology, ReplicaSettings settings, MakeRoutes make_routes);
  std::shared_ptr<Term> current() const;
  void open_term(const store::Fence& fence);
  void retire(std::shared_ptr<Term> term);
  ReplicaState state(bool leading) const;  // counters and gauges, for /healthz and /metrics
  std::string metrics_text(bool leading) const;
  void follower_answer(const api::HttpRequest& request, const api::Respond& respond) const;
  // The warm copy's thread: syncs while this replica follows, until stop_warming().
  void warm_loop();
  void stop_warming();

  model::Topology topology_;
  ReplicaSettings settings_;
  MakeRoutes make_routes_;
  std::string store_key_;
  std::string description_;
  std::shared_ptr<store::EtcdClient> client_;
  std::unique_ptr<store::LeaderElection> election_;
  mutable std::mutex mutex_;
  std::shared_ptr<Term> term_;
  std::vector<std::shared_ptr<Term>> retired_;  // dropped by poll()
  int64_t failed_term_ = 0;                // the term whose opening failed (resigned; not retried)
  std::shared_ptr<store::WarmRows> warm_;  // nullptr: warm_sync_ms 0
  std::thread warmer_;
  std::condition_variable warm_wake_;
  bool stopping_ = false;  // under mutex_
  std::atomic<uint64_t> warm_failures_{0};
};

}  // namespace detwan::control::daemon
