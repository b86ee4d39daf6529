#pragma once
// Keeps every gateway's agent-owned tunnels equal to what the agent wants (docs/control.md,
// "Gateway programming and reconciliation").
//
// One worker thread. For a gateway whose desired set changed, and for every gateway once per
// interval, it asks detwan-gw for its tunnels ({"cmd":"tunnels"}), computes the difference for
// the tunnels it owns (owner "agent:<name>"; the file's own tunnels are never touched) and
// sends one atomic `apply` guarded by `if_generation`. If the gateway refuses the batch, it
// applies the items one by one so a single bad tunnel cannot block the others, and reports
// each refusal by tunnel id. A gateway that restarted (new boot_id, no tunnels) while the agent
// was away, or that lost a tunnel, is re-programmed at the next pass.
//
// Threading: set_desired()/poke() from any thread; the observer is called on the worker thread
// without any reconciler lock held.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "control/gateway/tunnel_spec.h"

namespace detwan::control::gateway {

// How the reconciler reaches a gateway's admin socket (tests inject a fake gateway).
class GatewayClient {
 public:
  virtual ~GatewayClient() = default;
  // One request line, the answer line. Errors name the socket.
  virtual common::Result<std::string> request(const std::string& socket,
                                              const std::string& line) = 0;
};

class UnixGatewayClient final : public GatewayClient {
 public:
  explicit UnixGatewayClient(int timeout_ms = 2000) : timeout_ms_(timeout_ms) {}
  common::Result<std::string> request(const std::string& socket, const std::string& line) override;

 private:
  int timeout_ms_;
};

struct GatewayTarget {
  std::string name;
  std::string socket;      // admin socket path
  std::string public_key;  // registered X25519 public key (base64); "" = none registered
};

struct GatewayReport {
  uint32_t gateway = 0;
  bool reachable = false;
  std::string error;  // why it is unreachable or out of sync ("" if in sync)
  std::string boot_id;
  uint64_t generation = 0;
  bool restarted = false;                   // boot_id changed since the last report
  std::set<uint32_t> in_place;              // desired tunnel ids present as specified
  std::map<uint32_t, std::string> refused;  // tunnel id -> the gateway's refusal
  uint64_t desired_version = 0;             // of the desired set this pass worked from
  bool applied = false;                     // this pass changed the gateway
};

struct ReconcilerCounters {
  uint64_t passes = 0;
  uint64_t applies = 0;        // passes that changed the gateway (an apply it accepted)
  uint64_t refusals = 0;       // tunnels the gateway refused (summed over passes)
  uint64_t unreachable = 0;    // passes that could not reach it
  uint64_t restarts_seen = 0;  // boot_id changes
  uint64_t generation = 0;
  bool in_sync = false;
};

class Reconciler {
 public:
  using Observer = std::function<void(const GatewayReport&)>;
  Reconciler(std::vector<GatewayTarget> gateways, std::string owner, GatewayClient& client,
             Observer observer, int64_t interval_ns, const common::Clock& monotonic);
  ~Reconciler();  // stops the worker
  Reconciler(const Reconciler&) = delete;
  Reconciler& operator=(const Reconciler&) = delete;

  void start();
  void stop();
  // Replaces the desired set of one gateway and wakes the worker. Returns the version of the
  // gateway's desired set (it grows only when the set changes): a report with that
  // desired_version or a later one was computed against it.
  uint64_t set_desired(uint32_t gateway, std::vector<TunnelSpec> tunnels);
  void poke();  // reconcile every gateway now
  // One pass over the gateways that need it (all of them with force), on the calling thread
  // (tests drive it without start()).
  void reconcile_now(bool force);
  [[nodiscard]] std::vector<ReconcilerCounters> counters() const;
  [[nodiscard]] const std::vector<GatewayTarget>& gateways() const noexcept { return gateways_; }

 private:
  struct Slot {
    std::vector<TunnelSpec> desired;
    uint64_t version = 0;
    uint64_t done_version = UINT64_MAX;  // version of the last pass in sync
    int64_t next_pass_ns = 0;
    std::string boot_id;
    ReconcilerCounters counters;
  };
  void run();
  GatewayReport reconcile(uint32_t gateway, const std::vector<TunnelSpec>& desired,
                          uint64_t version, const std::string& last_boot_id);

  std::vector<GatewayTarget> gateways_;
  std::string owner_;
  GatewayClient& client_;
  Observer observer_;
  int64_t interval_ns_;
  const common::Clock& clock_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Slot> slots_;
  bool stopping_ = false;
  bool forced_ = false;
  std::thread worker_;
};

}  // namespace detwan::control::gateway
