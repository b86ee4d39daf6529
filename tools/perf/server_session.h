#pragma once
// One detwan-perf server session (private to session_server.cc): negotiates the test on the
// accepted control connection, runs its UDP socket (hello, sync replies, the forward receiver,
// the reverse sender thread) and returns the result. Runs on the calling thread until the
// session ends, `stop` is set, or the client vanishes (peer_timeout_ns of silence).
#include <atomic>
#include <cstdint>

#include "common/unique_fd.h"
#include "tools/perf/options.h"

namespace detwan::perf {

enum class SessionEnd : uint8_t {
  kServed,            // the result went back
  kRejected,          // bad hello / spec: error reply sent
  kMalformedControl,  // an undecodable control line: error reply sent
  kVanished,          // the client closed or went silent mid-session
  kStopped,           // the server is shutting down
  kFailed,            // a local error (socket setup): error reply sent
  kOverLimits,        // a spec beyond the server's limits (ServerLimits): error reply sent
};

// Why a UDP hello moved nothing (no ack, no address learned; docs/perf.md "Who gets packets").
enum class HelloRefusal : uint8_t {
  kSession,  // names another session
  kToken,    // lacks this session's token
  kSource,   // from an IP address other than the control connection's peer
  kLate,     // from another address (port) after the test started
};
inline constexpr size_t kHelloRefusals = 4;
[[nodiscard]] const char* to_string(HelloRefusal why) noexcept;

struct SessionCounters {
  std::atomic<uint64_t>* malformed_packets = nullptr;
  std::atomic<uint16_t>* last_udp_port = nullptr;  // set when a session opens its UDP socket
  std::atomic<uint64_t>* refused_hellos = nullptr;  // kHelloRefusals counters, by HelloRefusal
};

SessionEnd run_server_session(common::UniqueFd control_fd, uint32_t session_id,
                              const ServerOptions& options, const std::atomic<bool>& stop,
                              const SessionCounters& counters);

}  // namespace detwan::perf
