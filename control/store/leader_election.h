#pragma once
// Leader election among an agent's replicas (docs/control.md, "The agent on etcd"), with an
// etcd lease: the leader is the replica whose transaction created /detwan/<domain>/leader
// (value {"replica","url"}) under its lease; it renews the lease every TTL/4 and leads while
// the renewals arrive. The key's create revision names the term: the store's writes compare it
// (etcd_store.h, Fence), so a replica that lost its lease cannot commit anything, even before
// it notices.
//
// leading_now() is stricter than term(): true only while the last renewal's TTL, counted from
// when it was SENT, has more than a quarter left. etcd counts the TTL from when it RECEIVED the
// renewal, so a leader that stops getting answers (partitioned, SIGSTOPped and continued) stops
// programming gateways before any other replica can be elected. A lease that cannot be renewed
// in time, or a leader key that is gone or not ours, ends the term; the lease is then revoked
// (best effort) so that another replica is elected at once. The destructor resigns too.
//
// Threading: one thread of its own; every public method is thread-safe.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "control/store/etcd_client.h"
#include "control/store/etcd_store.h"

namespace detwan::control::store {

struct ElectionOptions {
  std::string domain;
  std::string replica;  // this replica's name (unique in the domain)
  std::string url;      // where its API answers (shown to clients by followers)
  int64_t lease_ttl_s = 2;
};

struct LeaderInfo {
  std::string replica;
  std::string url;
};

class LeaderElection {
 public:
  static common::Result<std::unique_ptr<LeaderElection>> start(std::shared_ptr<EtcdClient> client,
                                                                ElectionOptions options);
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // The fence of this replica's term while it leads; nullopt when it does not.
  [[nodiscard]] std::optional<Fence> term() const;
  // Leads and the lease is certainly alive (see above): gateways may be programmed.
  [[nodiscard]] bool leading_now() const;
  // The leader as last seen (this replica included); nullopt when there is none.
  [[nodiscard]] std::optional<LeaderInfo> leader() const;
  // Ends this replica's term: term() is empty from the election thread's next step, then the
  // lease is revoked. Until etcd has the revocation the lease is still this replica's (a write
  // fenced by the term may still commit; no other replica can be elected before the key is
  // gone). It stands again from the next round.
  void resign();
  [[nodiscard]] uint64_t terms_won() const;
  [[nodiscard]] uint64_t terms_lost() const;

 private:
  LeaderElection(std::shared_ptr<EtcdClient> client, ElectionOptions options);
  void run();
  void round();
  void campaign();
  void renew();
  void step_down_locked(const char* why);

  std::shared_ptr<EtcdClient> client_;
  ElectionOptions options_;
  std::string key_;
  common::MonotonicClock clock_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool resign_ = false;
  int64_t lease_ = 0;
  std::optional<Fence> term_;
  int64_t lease_deadline_ns_ = 0;  // monotonic: last renewal sent + its TTL
  std::optional<LeaderInfo> leader_;
  uint64_t won_ = 0;
  uint64_t lost_ = 0;
  std::thread thread_;
};

}  // namespace detwan::control::store
