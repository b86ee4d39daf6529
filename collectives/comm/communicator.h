#pragma once
// detwan collectives, C++ API. The C API (collectives/include/detwan/collectives.h) is a thin
// layer over this; the contract (ordering, blocking, errors) is the same and is written there.
//
//   auto id = UniqueId::create_root();                 // on one rank; send id.to_bytes() out
//   auto comm = Communicator::create(*id, rank, nranks, CommConfig::from_environment());
//   (*comm)->all_reduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum);
//
// Threading: one thread at a time per communicator issues operations; each communicator runs
// them in issue order on its own executor thread. Non-blocking calls return a Request.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/algo/algorithms.h"
#include "collectives/topology/cost_model.h"
#include "transport/security.h"
#include "collectives/types.h"

namespace detwan::collectives {

inline constexpr size_t kUniqueIdBytes = 128;

// Where the ranks meet. Serialises into the C API's 128-byte detwanUniqueId.
class UniqueId {
 public:
  // Starts a bootstrap root in this process (a thread that introduces the ranks to each other
  // and exits when all have joined or after `root_timeout_ns`); the id names its address.
  // `listen_host`: the address other ranks reach this process at (default: DETWAN_LISTEN_HOST,
  // else the host's first non-loopback IPv4 address, else 127.0.0.1).
  static Result<UniqueId> create_root(const std::string& listen_host = "",
                                      int64_t root_timeout_ns = 600'000'000'000);
  // As create_root, with `secret` (32-64 hex digits, e.g. $DETWAN_BOOTSTRAP_SECRET, which every
  // rank has) instead of a random one, so that the id handed to the other ranks can be
  // without_secret(): a launcher's store or command line then never carries the secret.
  static Result<UniqueId> create_root_with_secret(const std::string& secret,
                                                  const std::string& listen_host = "",
                                                  int64_t root_timeout_ns = 600'000'000'000);
  // The id without its "#SECRET": joined with $DETWAN_BOOTSTRAP_SECRET (as a fixed address,
  // which only rank 0 serves: give it to the other ranks only).
  [[nodiscard]] UniqueId without_secret() const;
  // "tcp://HOST:PORT" (rank 0 hosts the root there; DETWAN_BOOTSTRAP_SECRET) or
  // "file:///DIR#SECRET" (shared directory; 32-64 hex digits).
  static Result<UniqueId> from_string(const std::string& spec);
  static Result<UniqueId> from_bytes(const std::array<char, kUniqueIdBytes>& bytes);
  [[nodiscard]] std::array<char, kUniqueIdBytes> to_bytes() const;
  [[nodiscard]] std::string to_string() const;  // e.g. "tcp://10.0.1.2:5555#<32 hex>"

 private:
  std::string spec_;  // "tcp://host:port", "file:///dir"; plus "#<hex secret>"
};

struct CommConfig {
  std::string site = "default";
  int64_t timeout_ns = 300'000'000'000;      // per operation
  int64_t wan_rate_bps = 0;                  // per site pair and direction; 0 = best effort
  // Site-to-site round-trip time the cost model assumes in deterministic mode (otherwise the
  // RTT is measured at init). DETWAN_WAN_RTT ("20ms").
  int64_t wan_rtt_ns = 10'000'000;
  Algorithm algorithm = Algorithm::kAuto;
  int64_t chunk_bytes = 0;                   // 0 = the cost model's choice
  bool deterministic = false;
  // Every channel of the communicator is authenticated with a key derived from the bootstrap
  // secret (docs/collectives.md, "Who may talk to a rank"); kEncrypt encrypts its payload as
  // well, end to end (DETWAN_ENCRYPT=1, or DETWAN_CHANNEL_SECURITY=encrypt). kNone -- channels
  // without authentication, for benchmarks of the plain protocol -- only when asked for by name
  // (DETWAN_CHANNEL_SECURITY=none; the start-up log warns).
  transport::SecurityMode channel_security = transport::SecurityMode::kAuthenticate;
  std::string intra_backend = "shm";
  std::string inter_backend = "udp";
  std::string listen_host;                   // empty: as UniqueId::create_root
  int64_t setup_timeout_ns = 120'000'000'000;
  // Transport settings for the inter-site channels (rate is filled from wan_rate_bps).
  int32_t mtu_bytes = 1500;
  int64_t peer_timeout_ns = 10'000'000'000;
  // Backend config strings (e.g. loopback faults "loss=0.01,reorder=0.05") for tests.
  std::string intra_backend_config;
  std::string inter_backend_config;
  // WAN reservations of detwan-agent the job rides ("r-3" or "r-3,r-4", one per site pair;
  // reservation.h, docs/collectives.md "Reservations"). Empty: best effort, or wan_rate_bps.
  // With one, the reservations' rates replace wan_rate_bps and their bound the configured RTT.
  std::string reservation;
  std::string agent_url;    // "http://127.0.0.1:7800"
  std::string agent_token;  // bearer token of the agent (a read token is enough)
  int64_t reservation_poll_ns = 1'000'000'000;  // how often the watcher asks the agent
  // Operations that may be in flight at once (1..8; DETWAN_INFLIGHT_OPS): each of K lanes has
  // its own channels and executor, sharing this rank's pacing toward each site. Collectives go
  // to the lanes in turn in issue order (the same lane on every rank); one that touches a
  // buffer an earlier one still uses waits for it, a barrier for all; results are those of
  // running them one at a time (docs/collectives.md "Operations in flight together").
  int inflight_ops = 1;

  // Defaults overridden by DETWAN_SITE, DETWAN_TIMEOUT_MS, DETWAN_WAN_RATE, DETWAN_ALGO,
  // DETWAN_CHUNK_BYTES, DETWAN_DETERMINISTIC, DETWAN_ENCRYPT, DETWAN_CHANNEL_SECURITY,
  // DETWAN_INTRA_BACKEND,
  // DETWAN_INTER_BACKEND, DETWAN_LISTEN_HOST, DETWAN_MTU, DETWAN_WAN_RTT,
  // DETWAN_PEER_TIMEOUT_MS, DETWAN_RESERVATION, DETWAN_AGENT, DETWAN_AGENT_TOKEN,
  // DETWAN_RESERVATION_POLL_MS, DETWAN_INFLIGHT_OPS. kConfig naming the variable on a bad value.
  static Result<CommConfig> from_environment();
  // Every field, one line, for the start-up log.
  [[nodiscard]] std::string describe() const;
};

struct AsyncError {
  ErrorCode code = ErrorCode::kInternal;
  int failed_rank = -1;
  bool aborted = false;  // abort() was called on this communicator (not a peer's failure)
  std::string message;
};

class Communicator;

// A non-blocking operation (or group). Movable; destroying a pending Request waits for it.
class Request {
 public:
  Request() = default;
  Request(Request&&) noexcept = default;
  Request& operator=(Request&&) noexcept;
  ~Request();
  // Waits up to timeout_ns (< 0 = forever). nullopt: still running.
  std::optional<Result<void>> wait(int64_t timeout_ns = -1);
  [[nodiscard]] bool done() const;

  struct State;

 private:
  friend class Communicator;
  explicit Request(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// One recorded operation (the unit the executor runs; a group is a list of them).
struct OpDesc {
  Collective collective = Collective::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;             // elements, as in the C API call
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;                 // broadcast/reduce root; send/recv peer
  bool is_send = false;         // kSendRecv only
};

class Communicator {
 public:
  static Result<std::unique_ptr<Communicator>> create(const UniqueId& id, int rank, int nranks,
                                                      const CommConfig& config);
  ~Communicator();  // finalize() unless done, then closes the channels
  // Collective (every rank calls it, like MPI_Comm_free / ncclCommFinalize): waits for the
  // pending operations, then for every rank to get here (a barrier) and for this rank's last
  // messages to be acknowledged, so closing cannot cut off a peer's last operation. Skipped
  // on a communicator in error or aborted. Returns the barrier's error, if any. Idempotent.
  Result<void> finalize();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  [[nodiscard]] const Topology& topology() const;
  [[nodiscard]] const NetworkModel& network_model() const;
  [[nodiscard]] const CommConfig& config() const;
  // The transport's counters of this rank's channel to `peer` (its pacing rate among them);
  // std::nullopt for this rank itself, a rank out of range or a closed channel.
  [[nodiscard]] std::optional<transport::ChannelStats> peer_stats(int peer) const;

  // Blocking operations (arguments as the C API's).
  Result<void> all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op);
  Result<void> broadcast(const void* send, void* recv, size_t count, DataType type, int root);
  Result<void> reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      int root);
  Result<void> all_gather(const void* send, void* recv, size_t send_count, DataType type);
  Result<void> reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type,
                              ReduceOp op);
  Result<void> all_to_all(const void* send, void* recv, size_t count, DataType type);
  Result<void> send(const void* buf, size_t count, DataType type, int peer);
  Result<void> recv(void* buf, size_t count, DataType type, int peer);
  Result<void> barrier();

  // kInvalidArgument naming the argument (null buffer with count > 0, rank/root/peer out of
  // range, bad type/op/collective value, size overflow); what submit() checks first.
  [[nodiscard]] Result<void> validate(const OpDesc& op) const;
  // Non-blocking: validates at once (a bad argument is an error here, not in the Request).
  // On a communicator in error the Request completes at once with that error.
  Result<Request> submit(const OpDesc& op);
  // Runs the operations as one group: point-to-point ops posted together, collectives in order.
  Result<Request> submit_group(std::vector<OpDesc> ops);
  Result<void> run(const OpDesc& op);  // submit + wait

  // The plan the cost model picks for a collective of `bytes` (what run() will use).
  [[nodiscard]] Plan plan_for(Collective collective, int64_t bytes) const;
  void set_timeout_ns(int64_t timeout_ns);
  // Fails pending operations with kUnavailable "aborted" at once and closes the channels.
  void abort();
  [[nodiscard]] std::optional<AsyncError> async_error() const;
  // Collective: a new communicator of the ranks with the same color, ordered by (key, rank).
  // color < 0: returns nullptr.
  Result<std::unique_ptr<Communicator>> split(int color, int key,
                                              const std::optional<CommConfig>& config = {});

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace detwan::collectives
