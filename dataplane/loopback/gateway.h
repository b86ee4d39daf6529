#pragma once
// Loopback backend: N gateway engines (gw::Engine) joined by an in-memory WAN, driven in virtual
// time. This is the backend the engine's tests run on: no sockets, no threads, no sleeps,
// seeded randomness, so every schedule is checked exactly.
//
// Time: the WAN runs on "true" time (now_ns()); each engine has its own clock = true time +
// EngineSpec::clock_offset_ns, which is what it is given as now_ns (so clock offsets between
// gateways are real to the engines and must be estimated or configured, as on a real WAN).
// The driver calls every live engine's poll functions exactly at the instants its
// next_event_ns() names, so departure and release errors are 0: what the tests measure is the
// engine's logic, not this machine.
//
// WAN: a datagram an engine emits towards an endpoint goes to the engine whose WAN port has that
// local endpoint, over a link per direction (from engine, to engine) with configurable faults:
// delay, uniform jitter (FIFO: never reorders unless `reorder` says so), loss, duplication,
// reordering, corruption of a byte, truncation, and a cut (down). A dead engine (set_alive) is
// not polled and loses what is sent to it. Foreign datagrams can be injected on any port.
//
// Buffers come from the gateway's own pool (buffer_count handles; payload at the headroom
// wire::kHeaderSize, so the engine's header is written in place), and every handle an engine
// gives back is checked against the pool: a double free or a leak shows in pool counters.
//
// Threading: single-threaded; not a datapath (it allocates freely: it is test infrastructure).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <span>
#include <utility>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/engine.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::loopback {

struct LinkFaults {
  int64_t delay_ns = 0;   // one-way delay
  int64_t jitter_ns = 0;  // + uniform [0, jitter_ns]; arrivals stay in order (FIFO)
  double loss = 0;        // probability a datagram is lost
  double duplicate = 0;   // probability it arrives twice
  double reorder = 0;     // probability it is held reorder_delay_ns longer, out of FIFO order
  int64_t reorder_delay_ns = 1'000'000;
  double corrupt = 0;   // probability one byte (uniform position) is flipped
  double truncate = 0;  // probability it is cut to a uniform shorter length
  bool down = false;    // link cut: every datagram is lost
};

struct EngineSpec {
  gw::GatewayConfig config;
  int64_t clock_offset_ns = 0;  // engine clock - true time
};

struct Options {
  uint64_t seed = 1;
  uint32_t buffer_count = 1u << 16;
  int64_t start_ns = 1'000'000'000'000;  // true time at creation (engines: + their offset)
  bool capture_deliveries = true;        // keep every Delivery in deliveries(engine)
  // Shard of each engine, by engine index (missing: the whole gateway in one engine). A gateway
  // spread over cores (gw/shard.h) is one EngineSpec per shard, with the same config (and
  // name) and clock offset and shard indices 0 .. count-1; the loopback then does what the
  // backend's dispatch does: a local packet goes to the shard that owns its tunnel, a WAN
  // datagram to the shard that owns the tunnel id it carries, and after every instant the
  // followers adopt the lead shard's view of each peer (Engine::peer_sync_st / adopt_peer_st).
  std::vector<gw::ShardSpec> shards;
};

// One frame an engine emitted (observer only: `emit.bytes` is valid during the call).
struct TxRecord {
  uint32_t engine = 0;
  int64_t engine_ns = 0;  // the engine's clock at emission
  int64_t true_ns = 0;
  wire::DataType type = wire::DataType::kDatagram;  // data frames
  gw::TxEmit emit;
};

// One packet an engine released through poll_rx_st.
struct Delivery {
  uint32_t engine = 0;
  uint32_t tunnel_index = 0;
  uint32_t tunnel_id = 0;
  wire::DataType type = wire::DataType::kDatagram;
  bool late = false;
  bool best_effort = false;
  bool to_service = false;  // the tunnel has a service_deliver endpoint
  int64_t release_ns = 0;   // the engine's clock
  int64_t true_release_ns = 0;
  int64_t tx_timestamp_ns = 0;  // sender's clock
  int64_t target_ns = 0;        // receiver's clock
  std::vector<std::byte> payload;
};

struct WanCounters {
  uint64_t sent = 0, lost = 0, duplicated = 0, reordered = 0, corrupted = 0, truncated = 0;
  uint64_t unroutable = 0, to_dead = 0, delivered = 0, injected = 0;
};

// What the engine answered the backend, per engine.
struct EngineCounters {
  uint64_t submit_ok = 0, submit_dropped = 0, submit_malformed = 0, submit_invalid = 0;
  uint64_t tx_data = 0, tx_control = 0, tx_not_sent = 0;
  uint64_t rx_ok = 0, rx_consumed = 0, rx_dropped = 0, rx_malformed = 0, rx_invalid = 0;
  uint64_t released = 0, released_late = 0;
  uint64_t no_buffer = 0;
};

class Gateway {
 public:
  static common::Result<std::unique_ptr<Gateway>> create(std::vector<EngineSpec> engines,
                                                         const Options& options = {});
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  [[nodiscard]] uint32_t engine_count() const noexcept {
    return static_cast<uint32_t>(engines_.size());
  }
  [[nodiscard]] gw::Engine& engine(uint32_t i) { return *engines_.at(i).engine; }
  [[nodiscard]] int64_t now_ns() const noexcept { return now_ns_; }
  [[nodiscard]] int64_t engine_now_ns(uint32_t i) const {
    return now_ns_ + engines_.at(i).offset_ns;
  }
  [[nodiscard]] int64_t clock_offset_ns(uint32_t i) const { return engines_.at(i).offset_ns; }

  // Faults of the link from engine `from` to engine `to` (all their ports); others use the
  // default. Applies to datagrams sent from now on.
  void set_faults(uint32_t from, uint32_t to, const LinkFaults& faults);
  void set_default_faults(const LinkFaults& faults) { default_faults_ = faults; }
  // Faults of what engine `from` sends through its WAN port `port` (one WAN path, e.g. one of
  // two disjoint paths of a protected tunnel); overrides set_faults for that port. Each
  // (from, to, port) is its own FIFO link.
  void set_port_faults(uint32_t from, uint32_t port, const LinkFaults& faults);
  // A dead engine is not polled and everything sent to it is lost (peer death).
  void set_alive(uint32_t i, bool alive);
  // Engine i's clock steps forward by step_ns (an operator or a time daemon setting it): its
  // now_ns jumps, the others' do not. Forward only: an engine's time never goes backwards.
  void step_clock(uint32_t i, int64_t step_ns) {
    if (step_ns > 0) engines_.at(i).offset_ns += step_ns;
  }
  // Engine i crashes and starts again from its EngineSpec configuration at now (a new Engine:
  // new session epoch, sequence numbers from 0, no tunnels added at run time); the buffers the
  // old one held are freed and counted (restart_lost_buffers). Errors as create().
  common::Result<void> restart(uint32_t i);
  [[nodiscard]] uint64_t restart_lost_buffers() const noexcept { return restart_lost_; }
  [[nodiscard]] bool alive(uint32_t i) const { return engines_.at(i).alive; }

  // Local traffic, submitted at now_ns(): an IP packet read from the TUN device, or a datagram
  // on a tunnel's service port. Returns the engine's status (the buffer is freed unless kOk);
  // kInvalidArgument if the packet does not fit a buffer.
  common::Status inject_tun(uint32_t i, std::span<const std::byte> ip_packet);
  common::Status inject_service(uint32_t i, uint32_t tunnel_index,
                                std::span<const std::byte> payload);
  // A datagram arriving at engine i's WAN port `port` from `source` after delay_ns (foreign
  // traffic, forged or malformed packets).
  void inject_wan(uint32_t i, uint32_t port, const gw::Endpoint& source,
                  std::span<const std::byte> udp_payload, int64_t delay_ns = 0);

  // Earliest true time anything happens (INT64_MAX: nothing will).
  [[nodiscard]] int64_t next_event_ns() const;
  // Advances to next_event_ns() and processes everything due then; false if nothing is left.
  bool step();
  // Steps through every event up to and including true time t, then sets now_ns() to t.
  void run_until(int64_t t_ns);
  // True if an instant kept producing work without advancing (an engine bug); run_until stops.
  [[nodiscard]] bool stalled() const noexcept { return stalled_; }

  [[nodiscard]] std::vector<Delivery>& deliveries(uint32_t i) { return engines_.at(i).deliveries; }
  [[nodiscard]] const EngineCounters& counters(uint32_t i) const { return engines_.at(i).counters; }
  [[nodiscard]] const WanCounters& wan_counters() const noexcept { return wan_; }
  [[nodiscard]] uint32_t buffers_in_use() const noexcept {
    return static_cast<uint32_t>(buffers_.size() - free_.size());
  }
  // Datagrams on the WAN (each holds a buffer).
  [[nodiscard]] uint32_t in_flight() const noexcept {
    return static_cast<uint32_t>(in_flight_.size());
  }
  [[nodiscard]] uint64_t bad_frees() const noexcept { return bad_frees_; }

  void set_tx_observer(std::function<void(const TxRecord&)> observer) {
    tx_observer_ = std::move(observer);
  }
  // Every datagram as it goes onto the WAN (after the link's corruption and truncation, before
  // its delay): engine `from`'s port `port` to engine `to`'s port `to_port`.
  struct WireRecord {
    uint32_t from = 0, port = 0, to = 0, to_port = 0;
    gw::Endpoint source;
    std::span<const std::byte> bytes;  // valid during the call
  };
  void set_wire_observer(std::function<void(const WireRecord&)> observer) {
    wire_observer_ = std::move(observer);
  }
  void set_delivery_observer(std::function<void(const Delivery&)> observer) {
    delivery_observer_ = std::move(observer);
  }

 private:
  struct Buffer {
    std::vector<std::byte> bytes;  // allocated on first use
    uint32_t size = 0;             // datagram bytes from offset 0 (in flight)
    uint32_t payload_bytes = 0;    // payload at wire::kHeaderSize (local side)
    wire::DataType type = wire::DataType::kDatagram;
    bool in_use = false;
    uint32_t holder = UINT32_MAX;  // the engine that holds it (accepted it), else UINT32_MAX
  };
  struct Node {
    std::unique_ptr<gw::Engine> engine;
    gw::GatewayConfig config;  // as created (restart)
    gw::ShardSpec shard;
    int64_t offset_ns = 0;
    bool alive = true;
    EngineCounters counters;
    std::vector<Delivery> deliveries;
  };
  struct Link {
    int64_t last_arrival_ns = INT64_MIN;
  };
  struct InFlight {
    int64_t at_ns = 0;
    uint64_t order = 0;
    uint32_t engine = 0;
    uint32_t port = 0;
    gw::Endpoint source;
    uint64_t handle = 0;
    friend bool operator>(const InFlight& a, const InFlight& b) {
      return a.at_ns != b.at_ns ? a.at_ns > b.at_ns : a.order > b.order;
    }
  };

  Gateway() = default;
  bool allocate(uint64_t* handle);
  void release(uint64_t handle);
  Buffer& buffer(uint64_t handle) { return buffers_.at(handle); }
  void process(int64_t t_ns);
  void on_tx(uint32_t i, int64_t engine_ns, const gw::TxEmit& emit);
  void on_rx(uint32_t i, int64_t engine_ns, const gw::RxEmit& emit);
  // The copy of buffer `original` a protected tunnel's protection path wants (gw::SubmitInfo).
  void submit_replica(uint32_t i, const gw::SubmitInfo& submit, uint64_t original);
  void send_wan(uint32_t from, uint32_t port, const gw::Endpoint& destination, uint64_t handle);
  void deliver(const InFlight& datagram);
  // The shard of engine i's gateway that owns tunnel_id (i itself when not sharded).
  [[nodiscard]] uint32_t owner_shard(uint32_t i, uint32_t tunnel_id) const;
  void sync_shards();
  [[nodiscard]] const LinkFaults& faults(uint32_t from, uint32_t to) const;
  double uniform01();
  uint64_t below(uint64_t n);  // uniform in [0, n)

  std::vector<Node> engines_;
  std::vector<Buffer> buffers_;
  std::vector<uint64_t> free_;
  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>> in_flight_;
  std::map<std::pair<uint32_t, uint32_t>, LinkFaults> faults_;
  std::map<std::pair<uint32_t, uint32_t>, LinkFaults> port_faults_;  // (from, its port)
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, Link> links_;   // (from, to, from's port)
  LinkFaults default_faults_;
  std::mt19937_64 rng_;
  int64_t now_ns_ = 0;
  uint64_t next_order_ = 0;
  uint64_t bad_frees_ = 0;
  uint64_t restart_lost_ = 0;
  bool stalled_ = false;
  bool capture_ = true;
  WanCounters wan_;
  std::function<void(const TxRecord&)> tx_observer_;
  std::function<void(const Delivery&)> delivery_observer_;
  std::function<void(const WireRecord&)> wire_observer_;
};

}  // namespace detwan::dataplane::loopback
