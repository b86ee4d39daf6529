#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include "common/status.h"
#include "tools/probe/probe.h"
#include "tools/probe/receiver_stats.h"
#include "tools/probe/udp_socket.h"
#include "tools/probe/wire.h"

namespace detwan::probe {
namespace {

constexpr int kReceiveBufferBytes = 8 << 20;
constexpr int64_t kMaxLingerNs = 5 * kNsPerSec;

std::atomic<bool> g_stop{false};  // set by SIGINT/SIGTERM: print what was measured and exit

void on_signal(int /*signum*/) { g_stop.store(true, std::memory_order_relaxed); }

int64_t clock_ns(clockid_t clock) noexcept {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * kNsPerSec + ts.tv_nsec;
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;  // no SA_RESTART: poll() returns EINTR at once
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

struct Datagram {
  ssize_t bytes = 0;
  int64_t rx_ns = 0;  // kernel timestamp (CLOCK_REALTIME), or read now if absent
};

// One non-blocking receive; bytes < 0 when nothing is pending.
Datagram receive_one(int fd, uint8_t* buf, size_t buf_size) {
  iovec iov{buf, buf_size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  Datagram d;
  d.bytes = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_TRUNC);
  if (d.bytes < 0) return d;
  d.rx_ns = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
      timespec ts{};
      std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
      d.rx_ns = int64_t{ts.tv_sec} * kNsPerSec + ts.tv_nsec;
    }
  }
  if (d.rx_ns == 0) d.rx_ns = clock_ns(CLOCK_REALTIME);
  return d;
}

}  // namespace

int run_recv(const RecvOptions& options) {
  const SocketAddress local = parse_address(options.bind, options.port);
  UdpSocket socket(local.storage.ss_family);
  socket.set_receive_buffer(kReceiveBufferBytes);
  socket.enable_timestamps();
  socket.bind_to(local);
  install_signal_handlers();
  // Tests and scripts wait for this line before they start the sender.
  std::fprintf(stderr, "detwan-probe: listening on %s port %u\n", options.bind.c_str(),
               static_cast<unsigned>(options.port));
  std::fflush(stderr);

  ReceiverStats stats;
  bool locked = false;
  uint64_t run_id = 0;
  const int64_t end_ns =
      clock_ns(CLOCK_MONOTONIC) + static_cast<int64_t>(options.duration_s * kNsPerSec);
  int64_t fin_deadline_ns = INT64_MAX;
  // One byte more than the largest valid packet, so oversize datagrams are seen as such.
  uint8_t buf[kMaxPayloadBytes + 1];

  while (!g_stop.load(std::memory_order_relaxed)) {
    const int64_t now_ns = clock_ns(CLOCK_MONOTONIC);
    const int64_t until_ns = std::min(end_ns, fin_deadline_ns);
    if (now_ns >= until_ns) break;
    if (options.count > 0 && stats.received() >= options.count) break;
    pollfd pfd{socket.fd(), POLLIN, 0};
    const int64_t wait_ms = std::clamp<int64_t>((until_ns - now_ns) / 1'000'000 + 1, 1, 100);
    const int ready = ::poll(&pfd, 1, static_cast<int>(wait_ms));
    if (ready < 0 && errno != EINTR) {
      throw common::Failure(
          common::Error{common::ErrorCode::kIo, std::string("poll: ") + std::strerror(errno)});
    }
    if (ready <= 0) continue;
    // Drain what is queued, bounded so the deadline checks above keep running.
    for (int i = 0; i < 4096; ++i) {
      const Datagram d = receive_one(socket.fd(), buf, sizeof(buf));
      if (d.bytes < 0) break;
      Packet packet;
      if (static_cast<size_t>(d.bytes) > kMaxPayloadBytes ||
          decode(buf, static_cast<size_t>(d.bytes), &packet) != DecodeResult::kOk) {
        stats.on_malformed();
        continue;
      }
      if (!locked) {
        locked = true;
        run_id = packet.run_id;
      } else if (packet.run_id != run_id) {
        stats.on_foreign();
        continue;
      }
      if (packet.kind == Kind::kFin) {
        if (!stats.fin_seen()) {
          const int64_t linger_ns =
              std::min(kMaxLingerNs, std::max(static_cast<int64_t>(options.linger_s * kNsPerSec),
                                              2 * std::max<int64_t>(stats.max_owd_ns(), 0)));
          fin_deadline_ns = clock_ns(CLOCK_MONOTONIC) + linger_ns;
        }
        stats.on_fin(packet.seq, packet.tx_ns, packet.last_tx_ns);
        continue;
      }
      stats.on_data(packet.seq, packet.tx_ns, d.rx_ns, static_cast<uint64_t>(d.bytes));
    }
  }

  if (options.json) {
    fmt::print("{}\n", stats.json(options.count));
  } else {
    const uint64_t sent = stats.sent(options.count);
    const auto bursts = stats.loss_bursts(sent);
    const auto& owd = stats.owd_ns();
    fmt::print("sent {} received {} lost {} (bursts {}, mean {:.2f}, max {})\n", sent,
               stats.received(), bursts.total, bursts.count, bursts.mean_len(), bursts.max_len);
    fmt::print("one-way delay ns: min {} p50 {} p90 {} p99 {} p99.9 {} max {}\n", owd.min(),
               owd.percentile(0.5), owd.percentile(0.9), owd.percentile(0.99),
               owd.percentile(0.999), owd.max());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace detwan::probe
