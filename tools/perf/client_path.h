#pragma once
// One path of a detwan-perf client (private to session_client.cc): the control connection and
// UDP socket to one server address, its clock sync, the reverse receiver and the path's loop.
// With --compare a client runs two paths at once; the forward sender (session_io.h) is shared.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/json.hpp>

#include "common/status.h"
#include "tools/perf/clock_sync.h"
#include "tools/perf/control.h"
#include "tools/perf/metrics.h"
#include "tools/perf/report.h"
#include "tools/perf/session.h"
#include "tools/perf/session_io.h"
#include "tools/probe/udp_socket.h"

namespace detwan::perf {

// What every path shares during a test.
struct ClientContext {
  ClientContext(const ClientOptions& o, const IntervalSink& s) : options(o), sink(s) {}

  const ClientOptions& options;
  const IntervalSink& sink;
  std::mutex sink_mutex;                    // serialises sink calls across paths
  const std::atomic<bool>* stop = nullptr;  // external stop (SIGINT), may be null
  int64_t start_ns = 0;                     // CLOCK_REALTIME of the schedule start
  std::atomic<bool> sender_done{false};     // the forward sender has sent its fins
  SendOutcome sender_outcome;               // valid once sender_done (acquire)
};

struct ClientPath {
  explicit ClientPath(common::UniqueFd fd) : control(std::move(fd)) {}

  std::string target;  // "HOST:PORT" as given
  ControlChannel control;
  std::optional<probe::UdpSocket> udp;
  uint32_t session = 0;
  ClockSync clock;
  uint64_t next_sync_seq = 0;
  std::atomic<bool> alive{true};  // false once the path failed: the sender skips it
  StreamSender forward_sender;    // written by the sender thread only
  // Receivers of this path (path thread): the reverse stream, or ping-pong's two legs.
  std::optional<StreamReceiver> reverse, ping_forward, ping_reverse;
  uint64_t pings_sent = 0;
  PathReport report;
  boost::json::object result;  // the server's result message (empty if none came)
};

// Connects, sends the hello, reads accept/error, opens the UDP socket and completes the UDP
// hello. Errors: kInvalidArgument when the server rejected the spec (its message), else
// kUnavailable / kTimeout / kIo naming the target.
common::Result<std::unique_ptr<ClientPath>> open_path(const ClientOptions& options,
                                                      const std::string& host);
// kSyncRequest/kSyncReply exchanges before the test; an error when none succeeds.
common::Result<void> initial_sync(ClientPath& path, const ClientOptions& options, int exchanges);
// Runs the path from the start message to the result (or the peer vanishing) and fills
// path.report. On the path's own thread.
void run_path(ClientPath& path, ClientContext& context);
// Fills path.report from the server's result and the client's own receivers, after every
// thread of the test has been joined. Partial when the path failed.
void finish_path(ClientPath& path, const ClientContext& context);

boost::json::object clock_message(const char* type, const ClockSync& clock, ClockMode mode);

}  // namespace detwan::perf
