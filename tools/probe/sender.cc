#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "common/histogram.h"
#include "tools/probe/probe.h"
#include "tools/probe/receiver_stats.h"
#include "tools/probe/udp_socket.h"
#include "tools/probe/wire.h"

namespace detwan::probe {
namespace {

constexpr int kFinCopies = 5;
constexpr int64_t kFinSpacingNs = 2'000'000;
constexpr int64_t kStartDelayNs = 1'000'000;

int64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * kNsPerSec + ts.tv_nsec;
}

int64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * kNsPerSec + ts.tv_nsec;
}

}  // namespace

int run_send(const SendOptions& options) {
  const SocketAddress to = parse_address(options.to, options.port);
  UdpSocket socket(to.storage.ss_family);
  if (options.dscp >= 0) socket.set_dscp(options.dscp, to.storage.ss_family);
  common::set_min_timer_slack();

  std::random_device entropy;
  const uint64_t run_id = (uint64_t{entropy()} << 32) | entropy();
  uint8_t buf[kMaxPayloadBytes];
  common::LogLinearHistogram wake_late_ns(7);
  uint64_t send_errors = 0;
  int first_errno = 0;

  auto send_one = [&](const Packet& packet, size_t size) {
    const size_t n = encode(packet, buf, sizeof(buf), size);
    if (::sendto(socket.fd(), buf, n, 0, reinterpret_cast<const sockaddr*>(&to.storage),
                 to.length) != static_cast<ssize_t>(n)) {
      if (first_errno == 0) first_errno = errno;
      ++send_errors;
    }
  };

  // Deadlines are absolute (start + i / pps, integer arithmetic): a late wake-up does not push
  // every later packet back, so the average rate is exact.
  const int64_t start_ns = monotonic_ns() + kStartDelayNs;
  int64_t first_tx_ns = 0;
  int64_t last_tx_ns = 0;
  for (uint64_t seq = 0; seq < options.count; ++seq) {
    // seq < kMaxSeq (2^28), so seq * 1e9 fits in 64 bits.
    const auto offset_ns = static_cast<int64_t>(seq * uint64_t{kNsPerSec} / options.pps);
    const int64_t deadline_ns = start_ns + offset_ns;
    common::sleep_until_monotonic_ns(deadline_ns);
    wake_late_ns.record(monotonic_ns() - deadline_ns);
    Packet packet{Kind::kData, run_id, seq, realtime_ns(), 0};
    if (seq == 0) first_tx_ns = packet.tx_ns;
    last_tx_ns = packet.tx_ns;
    send_one(packet, options.size_bytes);
  }
  const int64_t end_ns = monotonic_ns();
  // The fin goes out several times, spaced, so that one loss does not hide it.
  for (int i = 0; i < kFinCopies; ++i) {
    common::sleep_until_monotonic_ns(end_ns + i * kFinSpacingNs);
    send_one(Packet{Kind::kFin, run_id, options.count, first_tx_ns, last_tx_ns}, kFinBytes);
  }

  const int64_t span_ns = last_tx_ns - first_tx_ns;
  const double tx_pps = per_second(options.count - 1, span_ns);
  if (options.json) {
    fmt::print(
        "{{\"sent\":{},\"send_errors\":{},\"run_id\":\"{:016x}\",\"tx_pps\":{:.1f},"
        "\"tx_span_ns\":{},\"wake_late_ns\":{}}}\n",
        options.count, send_errors, run_id, tx_pps, span_ns, wake_late_ns.summary_json());
  } else {
    fmt::print(
        "sent {} packets of {} bytes at {:.1f} pps (target {}); send errors {}; "
        "wake-up lateness p50 {} ns p99 {} ns max {} ns\n",
        options.count, options.size_bytes, tx_pps, options.pps, send_errors,
        wake_late_ns.percentile(0.5), wake_late_ns.percentile(0.99), wake_late_ns.max());
  }
  if (send_errors > 0) {
    std::fprintf(stderr, "detwan-probe: %llu sends failed (first: %s)\n",
                 static_cast<unsigned long long>(send_errors), std::strerror(first_errno));
  }
  return send_errors == 0 ? 0 : 1;
}

}  // namespace detwan::probe
