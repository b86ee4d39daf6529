#pragma once
// detwan-perf: what a test is (negotiated between client and server) and the options of each
// subcommand. Plain data, no behaviour.
#include <cstdint>
#include <string>

namespace detwan::perf {

// Default ports: the control connection (TCP) of client/server, and STAMP (RFC 8762, 862).
inline constexpr uint16_t kDefaultPort = 5301;
inline constexpr uint16_t kDefaultStampPort = 862;

enum class Mode : uint8_t {
  kStream,      // paced UDP test stream(s): delay, variation, loss, reordering
  kThroughput,  // as fast as possible (or at --bitrate): received rate and loss
  kPingPong,    // one packet in flight: RTT plus both one-way delays (sockperf ping-pong style)
};
enum class Direction : uint8_t { kForward, kReverse, kBidir };
enum class ScheduleKind : uint8_t {
  kPeriodic,  // one packet every 1/pps
  kPoisson,   // exponential gaps, mean 1/pps (RFC 2330 / RFC 3432 style sampling)
  kBurst,     // burst_packets back to back, bursts spaced so the mean rate is pps
};
// How one-way delays use the clock offset estimated from the time exchanges:
//   kAuto:     correct by the estimate only when it is larger than its own error bound (clocks
//              that agree within what can be measured are treated as synchronised);
//   kSync:     never correct (the hosts' clocks are synchronised: PTP, same host, same netns);
//   kEstimate: always correct by the estimate.
// The estimate and its error are reported in every case; a one-way delay is never clamped.
enum class ClockMode : uint8_t { kAuto, kSync, kEstimate };

// The test the client asks for; sent to the server on the control connection.
struct TestSpec {
  Mode mode = Mode::kStream;
  Direction direction = Direction::kForward;
  ScheduleKind schedule = ScheduleKind::kPeriodic;
  uint64_t pps = 1000;            // packets per second (from --bitrate when that is given)
  uint64_t bitrate_bps = 0;       // throughput mode: UDP payload bits/s; 0: as fast as possible
  uint32_t burst_packets = 10;    // kBurst only
  uint32_t size_bytes = 64;       // UDP payload of a test packet
  int64_t duration_ns = 10'000'000'000;
  int64_t bound_ns = 0;           // latency bound for "beyond bound" counts; 0: none
  int64_t interval_ns = 1'000'000'000;  // interval records (--json-stream); 0: none
  int dscp = -1;                  // -1: leave the default
  uint64_t seed = 1;              // Poisson schedule
  bool want_packets = false;      // per-packet records back from the server (--raw / --plot)
};

struct ClientOptions {
  std::string host;               // server address (numeric IPv4/IPv6 or a name)
  uint16_t port = kDefaultPort;
  std::string compare_host;       // --compare: the same schedule to a second address at once
  std::string bind;               // local address for the UDP sockets ("" = any)
  TestSpec spec;
  ClockMode clock = ClockMode::kAuto;
  int64_t peer_timeout_ns = 3'000'000'000;  // silence after which the peer counts as vanished
  int64_t linger_ns = 500'000'000;          // after the last packet: wait for stragglers
  bool json = false;
  bool json_stream = false;
  std::string json_path;          // also write the --json document to this file
  std::string raw_path;           // per-packet CSV
  std::string plot_path;          // .svg or .png: delay over time and delay CDF
};

// What a server agrees to do for one client (docs/perf.md, "Limits"): a test longer than
// max_duration_ns is refused, and so is a stream the server would send (reverse, bidir) faster
// than max_send_bps (UDP payload: pps x size x 8) or max_send_pps, unpaced (throughput -b 0),
// or in bursts of more than max_burst_bytes. The refusal names the field and the limit.
struct ServerLimits {
  int64_t max_duration_ns = 600'000'000'000;  // 10 minutes
  uint64_t max_send_bps = 1'000'000'000;
  uint64_t max_send_pps = 1'000'000;
  uint64_t max_burst_bytes = 1 << 20;
};

struct ServerOptions {
  std::string bind;               // "" = every address (IPv6 dual stack, else IPv4)
  uint16_t port = kDefaultPort;
  bool one_off = false;           // serve one client (its sessions), then exit
  int64_t peer_timeout_ns = 3'000'000'000;
  bool verbose = false;
  bool json = false;              // on exit: counters as JSON on stdout
  ServerLimits limits;
};

enum class StampTimestamp : uint8_t { kNtp, kPtp };

struct StampReflectOptions {
  std::string bind;
  uint16_t port = kDefaultStampPort;
  bool stateful = false;          // stateful: own sequence numbers per session (RFC 8762 4.3.2)
  StampTimestamp timestamp = StampTimestamp::kNtp;
  int64_t duration_ns = 0;        // 0: until interrupted
  bool json = false;              // on exit: counters as JSON
  // What a request can make the reflector send (docs/perf.md): replies to one source IP at most
  // rate_per_source_bps (UDP payload + IP/UDP headers) after a burst of burst_per_source_bytes;
  // a reply never larger than its request (requests under the 41-byte TWAMP Light reflector
  // packet are refused unless answer_short); the reply's DSCP is the reflector's own unless
  // honour_dscp lets a Class of Service TLV choose it.
  uint64_t rate_per_source_bps = 10'000'000;
  uint64_t burst_per_source_bytes = 65'536;
  bool answer_short = false;
  bool honour_dscp = false;
};

struct StampSenderOptions {
  std::string host;
  uint16_t port = kDefaultStampPort;
  uint64_t count = 100;
  int64_t interval_ns = 100'000'000;  // between test packets
  StampTimestamp timestamp = StampTimestamp::kNtp;
  uint16_t ssid = 1;              // RFC 8972 session id
  int dscp = -1;
  uint32_t size_bytes = 44;       // padded with MBZ (>= 44)
  int64_t timeout_ns = 2'000'000'000;  // wait for the last reflections
  ClockMode clock = ClockMode::kAuto;
  bool json = false;
};

}  // namespace detwan::perf
