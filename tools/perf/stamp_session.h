#pragma once
// STAMP reflector and sender as objects (run_stamp_reflect / run_stamp_sender in stamp.h wrap
// them with printing and signal handling); tests drive them in-process on loopback.
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <time.h>

#include <netinet/in.h>

#include <boost/json.hpp>

#include "common/histogram.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "tools/perf/metrics.h"
#include "tools/perf/options.h"
#include "tools/perf/stamp_limiter.h"
#include "tools/perf/stamp_wire.h"

namespace detwan::perf {

// CLOCK_REALTIME now, in ns (STAMP timestamps are wall-clock times).
inline int64_t realtime_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct StampSessionCount {
  std::string peer;  // "ADDR:PORT" ("[v6]:PORT")
  uint16_t ssid = 0;
  uint64_t packets = 0;
};

struct StampReflectorCounters {
  uint64_t received = 0;             // datagrams read
  uint64_t reflected = 0;            // replies sent
  uint64_t malformed_too_short = 0;  // < 14 bytes: no sequence number, timestamp, estimate
  uint64_t twamp_light = 0;          // 14..43 bytes: answered with the 44-byte base packet
  uint64_t tlv_malformed = 0;  // requests whose TLVs were truncated (flagged M, still reflected)
  uint64_t send_errors = 0;
  std::array<uint64_t, 64> dscp_received{};  // requests per DSCP (IP_RECVTOS / IPV6_RECVTCLASS)
  uint64_t sessions_overflow = 0;  // table full, none idle: reflected statelessly, not counted
  // What a request could not make the reflector send (docs/perf.md):
  uint64_t refused_short = 0;      // < 41 bytes: the reply would be larger (not answer_short)
  uint64_t rate_limited = 0;       // the source's reply budget was spent: not answered
  uint64_t sources_shared = 0;     // replies budgeted by the shared bucket (source table full)
  uint64_t dscp_not_honoured = 0;  // a Class of Service TLV asked for a DSCP (not honour_dscp)
  std::vector<StampSessionCount> sessions;
  [[nodiscard]] uint64_t malformed() const noexcept { return malformed_too_short; }
};

// Session-Reflector. Construction binds the socket (throws common::Failure naming the address,
// or kInvalidArgument for a zero rate or burst per source);
// run() serves on the calling thread until stop() (any thread), the duration of the options, or
// a readable `extra_stop_fd` (a signalfd). counters() is exact after run() returned.
class StampReflector {
 public:
  static constexpr size_t kMaxSessions = 4096;
  static constexpr int64_t kSessionIdleNs = 300'000'000'000;  // reusable after 5 idle minutes

  explicit StampReflector(const StampReflectOptions& options);
  ~StampReflector();
  StampReflector(const StampReflector&) = delete;
  StampReflector& operator=(const StampReflector&) = delete;

  [[nodiscard]] uint16_t port() const noexcept { return port_; }
  [[nodiscard]] int family() const noexcept { return family_; }
  void run(int extra_stop_fd = -1);
  void stop() noexcept;
  [[nodiscard]] StampReflectorCounters counters() const;
  [[nodiscard]] boost::json::object counters_json() const;

 private:
  struct Session {
    in6_addr address{};
    uint16_t port = 0;
    uint16_t ssid = 0;
    bool used = false;
    uint32_t next_seq = 0;
    uint64_t packets = 0;
    int64_t last_seen_ns = 0;
  };
  void on_datagram(size_t size, const sockaddr_storage& from, socklen_t from_len, int64_t rx_ns,
                   int ttl, int tos) noexcept;
  Session* session_for(const sockaddr_storage& from, uint16_t ssid, int64_t now_ns) noexcept;

  StampReflectOptions options_;
  common::UniqueFd fd_;
  common::UniqueFd stop_fd_;  // eventfd
  int family_ = 0;
  uint16_t port_ = 0;
  std::vector<Session> sessions_;  // open addressing, kMaxSessions slots, allocated up front
  std::vector<uint8_t> rx_buf_, tx_buf_;
  StampReflectorCounters counters_;
  stamp::LocalClockState clock_;  // adjtimex(), refreshed once a second
  int64_t clock_read_ns_ = 0;
  stamp::SourceLimiter limiter_;
  std::atomic<bool> stopping_{false};
};

// What one sender run measured.
struct StampSenderResult {
  std::string target;  // "HOST:PORT"
  uint16_t ssid = 0;
  StampTimestamp timestamp = StampTimestamp::kNtp;
  uint64_t sent = 0, received = 0, lost = 0, duplicates = 0, malformed = 0, foreign_ssid = 0;
  uint64_t send_errors = 0;
  bool stateful_reflector = false;                     // a reflected seq differed from the sender's
  std::optional<uint64_t> forward_lost, reverse_lost;  // only with a stateful reflector
  int64_t clock_offset_ns = 0, clock_error_ns = 0;
  bool clock_valid = false, clock_corrected = false;
  int64_t correction_ns = 0;
  std::optional<int64_t> reflector_error_estimate_ns;
  std::optional<bool> reflector_synchronized;
  int dscp_sent = 0;
  std::optional<int> dscp_received;            // on the reflected packets (IP_RECVTOS here)
  std::optional<int> dscp_at_reflector;        // reported by the reflector (Class of Service TLV)
  std::optional<int> sender_ttl_at_reflector;  // last reflection's Session-Sender TTL
  uint32_t reply_bytes = 0;                    // size of the last reflection
  Distribution rtt_ns, owd_forward_ns, owd_reverse_ns, ipdv_forward_ns;
};

// Sends options.count packets and collects the reflections (see stamp.h). Setup errors (bad
// address, socket) come back as the error; no reflection at all is a result with received 0.
common::Result<StampSenderResult> run_stamp_session(const StampSenderOptions& options);

boost::json::object stamp_result_to_json(const StampSenderResult& r);
void print_stamp_table(const StampSenderResult& r, std::FILE* out);

}  // namespace detwan::perf
