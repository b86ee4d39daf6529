#pragma once
// Private to collectives/comm: the communicator's state (Communicator::Impl), Request::State
// and the setup helpers shared by create() and split().
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/communicator.h"
#include "collectives/comm/executor.h"
#include "collectives/comm/reservation.h"
#include "collectives/net/peers.h"
#include "collectives/topology/cost_model.h"
#include "collectives/topology/topology.h"
#include "transport/transport.h"

namespace detwan::collectives {

struct Request::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  std::optional<Result<void>> result;

  void complete(Result<void> result);
  std::optional<Result<void>> wait(int64_t timeout_ns);  // < 0: forever; nullopt: not yet
};

// Intra-site link assumed by the cost model (not measured): 20 us per message (shm/tcp
// software cost + wake-up), 10 Gbit/s per channel (a memory copy through a ring or loopback
// TCP, conservatively).
inline constexpr int64_t kIntraAlphaNs = kDefaultIntraLink.alpha_ns;
inline constexpr int64_t kIntraRateBps = kDefaultIntraLink.rate_bps;
// Inter-site rate assumed when the tunnel is best effort (wan_rate_bps = 0): 1 Gbit/s.
inline constexpr int64_t kBestEffortWanRateBps = 1'000'000'000;
// finalize()'s barrier waits at most this long for the other ranks.
inline constexpr int64_t kFinalizeTimeoutNs = 30'000'000'000;

// Per site (index = site), the pacing group of this rank's channels toward it; null for its own
// site and best-effort pairs.
using PacingGroups = std::vector<std::shared_ptr<transport::PacingGroup>>;

struct Communicator::Impl {
  int rank = 0;
  int size = 1;
  CommConfig config;
  std::string listen_host;  // the host the endpoints listen on (children inherit it)
  // The communicator's key (Bootstrap::communicator_key(); a split child's derives from its
  // parent's): its channels authenticate with it, and its mesh hellos prove the rank with it.
  CommKey key{};
  uint64_t splits = 0;  // split() calls so far: every rank counts the same (split is collective)
  Topology topology;
  NetworkModel model;
  // Destruction order matters: executor (joins) before peers (closes channels) before the
  // endpoints (their progress threads drive the channels).
  std::unique_ptr<transport::Endpoint> intra_endpoint;
  std::unique_ptr<transport::Endpoint> inter_endpoint;
  std::unique_ptr<Peers> peers;
  PacingGroups wan_pacing;
  // The WAN reservations it rides (CommConfig::reservation) and their watcher; the watcher
  // stops before the peers it fails go away.
  std::optional<WanReservations> wan;
  std::unique_ptr<ReservationWatch> watch;

  std::atomic<int64_t> timeout_ns{0};
  std::atomic<bool> aborted{false};
  std::atomic<bool> finalized{false};
  mutable std::mutex error_mutex;
  std::optional<AsyncError> error;
  mutable std::mutex plan_mutex;
  mutable std::set<std::pair<int, int>> logged_plans;  // (collective, algorithm) logged once

  std::unique_ptr<Executor> executor;

  // Operations in flight together (lanes.cc; config.inflight_ops = K > 1): lanes 1..K-1, each a
  // communicator of the same ranks with its own channels and executor (this one is lane 0).
  // Submissions pick a lane and the earlier operations they must wait for under submit_mutex.
  struct InFlight {
    size_t lane = 0;
    std::vector<std::pair<uintptr_t, uintptr_t>> reads;   // [begin, end) byte ranges
    std::vector<std::pair<uintptr_t, uintptr_t>> writes;
    std::shared_ptr<Request::State> state;
  };
  std::mutex submit_mutex;
  uint64_t collectives_issued = 0;  // counts groups with a collective: the same on every rank
  std::vector<InFlight> in_flight;
  // Last members: destroyed first (each lane's executor runs what was posted to it, which may
  // wait for this executor's operations, so the lanes go before it).
  std::vector<std::unique_ptr<Communicator::Impl>> lanes;

  // The operations of a submission on the lane they belong to, after the earlier operations
  // whose buffers they share (all of them for a barrier).
  Request submit(std::vector<OpDesc> ops, int64_t timeout_ns);

  // Executor thread: runs one operation or group (see executor.cc).
  Result<void> run_ops(std::span<const OpDesc> ops, int64_t timeout_ns);
  // Records the first failure as the communicator's async error and closes every channel (the
  // peers learn at once); returns the error every operation from now on fails with.
  Error fail(const Error& error);
  Error record_error(const Error& cause);  // fail()'s bookkeeping; error_mutex held
  [[nodiscard]] std::optional<Error> current_error() const;
  // The plan for a collective of `bytes`; logs each (collective, algorithm) the first time.
  [[nodiscard]] Plan plan_for(Collective collective, int64_t bytes, bool log) const;
  // Queues a task on the executor; the returned Request completes with its result.
  Request post(Executor::Task task);
  // Waits (on the executor, after everything queued) for the copied sends' acknowledgements.
  Result<void> executor_flush();
};

// Adds lanes 1..config.inflight_ops-1 to a communicator just built (lanes.cc): each a
// communicator of the same ranks (its key derived from impl's and the lane number) whose
// channels join impl's pacing groups. Collective over impl's ranks.
Result<void> add_lanes(Communicator::Impl& impl);

// A bootstrap whose exchange is an all-gather over an existing communicator's channels, on its
// executor (split children and lanes); `members` are its ranks, in the new rank order.
class ParentBootstrap final : public Bootstrap {
 public:
  ParentBootstrap(Communicator::Impl& parent, std::vector<int> members, CommKey key)
      : parent_(parent), members_(std::move(members)), key_(key) {}
  [[nodiscard]] std::string local_host() const override;
  [[nodiscard]] CommKey communicator_key() const override { return key_; }
  Result<std::vector<std::string>> exchange(const std::string& mine, int64_t timeout_ns) override;

 private:
  Communicator::Impl& parent_;
  std::vector<int> members_;
  CommKey key_;
};

// A lane's key: HKDF(parent key, info "detwan comm v1 lane" | lane).
Result<CommKey> lane_key(const CommKey& parent, int lane);

// Makes a transport endpoint: transport::make_endpoint, or a test's wrapper around it (which
// sees the options, e.g. the Security, the communicator hands each endpoint).
using EndpointFactory = std::function<Result<std::unique_ptr<transport::Endpoint>>(
    std::string_view backend, const transport::EndpointOptions& options)>;

// What the communicator's endpoints authenticate with: its key, mode kAuthenticate (kEncrypt
// with config.channel_security), context "detwan collectives v1".
transport::Security communicator_security(const CommKey& key, const CommConfig& config);

// A split child's key: HKDF(parent key, info "detwan comm v1 split" | split index | color |
// the child's members as parent ranks, in child rank order). Every member computes the same;
// another split (another index or color) another.
Result<CommKey> split_key(const CommKey& parent, uint64_t split_index, int color,
                          const std::vector<int>& members);

// Setup (setup.cc): endpoints, bootstrap exchange of addresses, topology, mesh, network model.
// `nranks`/`rank` are this communicator's; the bootstrap must serve exactly that exchange.
// make_endpoint: empty = transport::make_endpoint. inherited_pacing: the pacing groups of
// another communicator of the same ranks (a lane) whose share this one's channels join;
// null = groups of its own.
Result<std::unique_ptr<Communicator::Impl>> build_communicator(
    Bootstrap& bootstrap, int rank, int nranks, const CommConfig& config,
    const EndpointFactory& make_endpoint = {}, const PacingGroups* inherited_pacing = nullptr);

// Escaped text of one rank's bootstrap blob: fields joined by '|', '\' escapes '|' and '\'.
std::string encode_fields(const std::vector<std::string>& fields);
Result<std::vector<std::string>> decode_fields(std::string_view text);

// Every rank's blob (index = rank) over an existing communicator's Peers: all-gather of the
// sizes, then of the blobs padded to the largest. Executor thread of that communicator.
Result<std::vector<std::string>> all_gather_blobs(Peers& peers, const Topology& topology,
                                                  const std::string& mine, Deadline deadline);

// "64 MiB", "12 KiB", "8 B"; "2.9 s", "14 ms", "35 us" (plan logs).
std::string human_bytes(int64_t bytes);
std::string human_ns(double ns);

}  // namespace detwan::collectives
