#pragma once
// detwan-perf client and server: a TCP control connection negotiates the test (JSON lines,
// docs/perf.md), then UDP test streams run in the asked directions while sync exchanges (10/s)
// measure RTT and the clock offset. Results of the server's receiving side come back on the
// control connection. Both return the process exit status: 0 complete, 1 partial or failed
// (a vanished peer: a clear message and the results so far), 2 bad arguments.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/json.hpp>

#include "common/status.h"
#include "tools/perf/metrics.h"
#include "tools/perf/options.h"
#include "tools/perf/report.h"

namespace detwan::perf {

int run_client(const ClientOptions& options);
int run_server(const ServerOptions& options);

// Called for each interval record as it arrives (target "HOST:PORT", direction "forward" or
// "reverse"). Calls are serialised (never concurrent) but come from the session's threads.
using IntervalSink =
    std::function<void(const std::string& target, const char* direction, const DirectionResult&)>;

// Runs one test (both paths with --compare) and returns what was measured. An error only when
// no test could start: kInvalidArgument when the server rejected the request (its message),
// kUnavailable/kTimeout/kIo when it could not be reached. A peer that vanishes mid-test gives a
// report whose PathReport.error says so, with the counts so far. `stop` (e.g. set from SIGINT)
// ends the test early with the results so far.
common::Result<TestReport> run_test(const ClientOptions& options, const IntervalSink& sink = {},
                                    const std::atomic<bool>* stop = nullptr);

// UDP hellos that moved nothing, per reason (server_session.h, HelloRefusal).
struct RefusedHellos {
  uint64_t session = 0;  // named another session
  uint64_t token = 0;    // without this session's token
  uint64_t source = 0;   // from an IP other than the control connection's peer
  uint64_t late = 0;     // from another port after the test started
  [[nodiscard]] uint64_t total() const noexcept { return session + token + source + late; }
};

struct ServerCounters {
  uint64_t sessions_served = 0;    // sessions that returned a result
  uint64_t sessions_vanished = 0;  // the client went silent or closed mid-session
  uint64_t rejected_requests = 0;  // bad hello / spec: error reply sent, connection closed
  uint64_t over_limits = 0;        // of those: a spec beyond the server's limits
  uint64_t malformed_control = 0;  // undecodable or unexpected control lines
  uint64_t malformed_packets = 0;  // foreign, truncated or undecodable UDP datagrams
  uint64_t active_sessions = 0;
  uint16_t last_udp_port = 0;  // UDP port of the latest session (tests aim datagrams at it)
  RefusedHellos refused_hellos;
};
// The counters as the server's --json prints them on exit (docs/perf.md).
boost::json::object server_counters_json(const ServerCounters& counters);

// The detwan-perf server: accepts control connections on one TCP port and runs each session on
// its own threads. start() binds (port 0: any free port, see port()) and returns at once; the
// server then runs until stop() (or, with one_off, until its first client's sessions end:
// wait() returns). Thread-safe: counters() and stop() may be called from any thread.
class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  common::Result<void> start();
  [[nodiscard]] uint16_t port() const noexcept;
  // Ends every session (their clients see the control connection close) and joins all threads.
  void stop();
  // Blocks until the server has stopped (stop(), or one_off done) or `stop_flag` becomes true.
  void wait(const std::atomic<bool>* stop_flag = nullptr);
  [[nodiscard]] ServerCounters counters() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace detwan::perf
