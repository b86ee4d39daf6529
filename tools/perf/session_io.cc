#include "tools/perf/session_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <time.h>

#include "common/clock.h"
#include "tools/perf/schedule.h"

namespace detwan::perf {
namespace {

constexpr size_t kSendBatch = 32;
constexpr int kFinCopies = 3;
constexpr int64_t kFinSpacingNs = 1'000'000;
constexpr int64_t kMaxSleepStepNs = 100'000'000;
constexpr int64_t kMinLateGraceNs = 100'000'000;
constexpr int64_t kMaxLateGraceNs = 1'000'000'000;

int64_t read_ns(clockid_t clock) noexcept {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * kNsPerSec + ts.tv_nsec;
}

timespec to_timespec(int64_t ns) noexcept {
  return timespec{static_cast<time_t>(ns / kNsPerSec), static_cast<long>(ns % kNsPerSec)};
}

bool alive(const StreamTarget& t) noexcept {
  return t.alive == nullptr || t.alive->load(std::memory_order_relaxed);
}

void send_fins(std::span<StreamTarget> targets, uint64_t sent, const std::atomic<bool>& stop) {
  for (int copy = 0; copy < kFinCopies; ++copy) {
    if (copy > 0 && !sleep_until_realtime(realtime_ns() + kFinSpacingNs, stop)) return;
    for (StreamTarget& t : targets) {
      if (!alive(t)) continue;
      Packet fin{Kind::kFin, t.session, 0, realtime_ns(), static_cast<int64_t>(sent), 0};
      (void)send_packet(t.fd, t.to, t.to_length, fin, kHeaderBytes);
    }
  }
}

SendOutcome send_paced(const TestSpec& spec, uint64_t max_packets, int64_t start_ns,
                       std::span<StreamTarget> targets, const std::atomic<bool>& stop) {
  SendOutcome out;
  SendSchedule schedule(spec.schedule, spec.pps, spec.burst_packets, spec.seed, start_ns);
  const int64_t end_ns = start_ns + spec.duration_ns;
  const int64_t late_grace_ns =
      std::clamp<int64_t>(spec.duration_ns / 10, kMinLateGraceNs, kMaxLateGraceNs);
  const size_t size = spec.size_bytes;
  std::vector<uint8_t> buf(size);
  const size_t n = targets.size();
  for (uint64_t seq = 0; seq < max_packets; ++seq) {
    const int64_t deadline_ns = schedule.next_ns();
    // A sender that cannot keep up stops a little after the end rather than sending the rest
    // of the schedule late for as long as that takes (the schedule error shows it was late).
    if (deadline_ns >= end_ns || realtime_ns() >= end_ns + late_grace_ns) break;
    if (!sleep_until_realtime(deadline_ns, stop)) break;
    bool any = false;
    for (size_t k = 0; k < n; ++k) {
      // Alternate which path goes first, so neither is always the second of the pair.
      StreamTarget& t = targets[(k + seq) % n];
      if (!alive(t)) continue;
      any = true;
      const Packet p{Kind::kData, t.session, seq, realtime_ns(), 0, 0};
      if (!send_packet(t.fd, t.to, t.to_length, p, size)) {
        ++out.send_errors;
        continue;
      }
      t.sender->on_sent(deadline_ns, p.t_a, static_cast<uint32_t>(size));
      if (out.first_tx_ns == 0) out.first_tx_ns = p.t_a;
      out.last_tx_ns = p.t_a;
    }
    if (!any) break;
    out.sent = seq + 1;
  }
  return out;
}

SendOutcome send_batched(const TestSpec& spec, uint64_t max_packets, int64_t start_ns,
                         std::span<StreamTarget> targets, const std::atomic<bool>& stop) {
  SendOutcome out;
  const bool paced = spec.bitrate_bps > 0;
  SendSchedule schedule(ScheduleKind::kPeriodic, spec.pps, 1, spec.seed, start_ns);
  const int64_t end_ns = start_ns + spec.duration_ns;
  const size_t size = spec.size_bytes;
  std::vector<uint8_t> buffers(kSendBatch * size);
  std::array<iovec, kSendBatch> iov{};
  std::array<mmsghdr, kSendBatch> msgs{};
  std::array<int64_t, kSendBatch> tx{};
  if (!sleep_until_realtime(start_ns, stop)) return out;
  const size_t n = targets.size();
  uint64_t seq = 0;
  for (uint64_t batch_no = 0; seq < max_packets && !stop.load(std::memory_order_relaxed);
       ++batch_no) {
    const auto batch = static_cast<size_t>(std::min<uint64_t>(kSendBatch, max_packets - seq));
    int64_t deadline_ns = realtime_ns();
    if (paced) {
      deadline_ns = schedule.next_ns();
      for (size_t j = 1; j < batch; ++j) (void)schedule.next_ns();
      if (deadline_ns >= end_ns || !sleep_until_realtime(deadline_ns, stop)) break;
    } else if (deadline_ns >= end_ns) {
      break;
    }
    bool any = false;
    for (size_t k = 0; k < n; ++k) {
      StreamTarget& t = targets[(k + batch_no) % n];
      if (!alive(t)) continue;
      any = true;
      for (size_t j = 0; j < batch; ++j) {
        uint8_t* b = buffers.data() + j * size;
        tx[j] = realtime_ns();
        const Packet p{Kind::kData, t.session, seq + j, tx[j], 0, 0};
        (void)encode(p, b, size, size);
        iov[j] = iovec{b, size};
        msgs[j].msg_hdr = msghdr{};
        msgs[j].msg_hdr.msg_iov = &iov[j];
        msgs[j].msg_hdr.msg_iovlen = 1;
        msgs[j].msg_hdr.msg_name = const_cast<sockaddr_storage*>(t.to);
        msgs[j].msg_hdr.msg_namelen = t.to == nullptr ? 0 : t.to_length;
      }
      const int sent = ::sendmmsg(t.fd, msgs.data(), static_cast<unsigned>(batch), 0);
      const size_t ok = sent > 0 ? static_cast<size_t>(sent) : 0;
      out.send_errors += batch - ok;
      for (size_t j = 0; j < ok; ++j) {
        t.sender->on_sent(paced ? deadline_ns : tx[j], tx[j], static_cast<uint32_t>(size));
      }
      if (ok > 0) {
        if (out.first_tx_ns == 0) out.first_tx_ns = tx[0];
        out.last_tx_ns = tx[ok - 1];
      }
    }
    if (!any) break;
    seq += batch;
    out.sent = seq;
  }
  return out;
}

}  // namespace

int64_t realtime_ns() noexcept { return read_ns(CLOCK_REALTIME); }
int64_t monotonic_ns() noexcept { return read_ns(CLOCK_MONOTONIC); }

bool sleep_until_realtime(int64_t deadline_ns, const std::atomic<bool>& stop) noexcept {
  for (;;) {
    if (stop.load(std::memory_order_relaxed)) return false;
    const int64_t now = realtime_ns();
    if (now >= deadline_ns) return true;
    const int64_t step = std::min(deadline_ns, now + kMaxSleepStepNs);
    const timespec ts = to_timespec(step);
    (void)::clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, nullptr);
  }
}

bool send_packet(int fd, const sockaddr_storage* to, socklen_t to_length, const Packet& p,
                 size_t size) noexcept {
  // Control packets are small; the stack buffer covers every size a spec may ask for.
  uint8_t buf[kMaxPacketBytes];
  const size_t n = encode(p, buf, sizeof(buf), std::max(size, kHeaderBytes));
  if (n == 0) return false;
  const ssize_t rc =
      ::sendto(fd, buf, n, 0, reinterpret_cast<const sockaddr*>(to), to == nullptr ? 0 : to_length);
  return rc == static_cast<ssize_t>(n);
}

DatagramReader::DatagramReader(size_t batch, size_t max_bytes)
    : batch_(batch),
      max_bytes_(max_bytes),
      buffers_(batch * max_bytes),
      iovecs_(batch),
      messages_(batch),
      from_(batch),
      controls_(batch),
      rx_ns_(batch) {}

int DatagramReader::receive(int fd) noexcept {
  for (size_t i = 0; i < batch_; ++i) {
    iovecs_[i] = iovec{buffers_.data() + i * max_bytes_, max_bytes_};
    msghdr& h = messages_[i].msg_hdr;
    h = msghdr{};
    h.msg_iov = &iovecs_[i];
    h.msg_iovlen = 1;
    h.msg_name = &from_[i];
    h.msg_namelen = sizeof(sockaddr_storage);
    h.msg_control = controls_[i].data();
    h.msg_controllen = controls_[i].size();
    messages_[i].msg_len = 0;
  }
  const int n =
      ::recvmmsg(fd, messages_.data(), static_cast<unsigned>(batch_), MSG_DONTWAIT, nullptr);
  if (n <= 0) return 0;
  int64_t now = 0;
  for (int i = 0; i < n; ++i) {
    msghdr& h = messages_[idx(i)].msg_hdr;
    int64_t rx = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts{};
        std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
        rx = int64_t{ts.tv_sec} * kNsPerSec + ts.tv_nsec;
      }
    }
    if (rx == 0) {
      if (now == 0) now = realtime_ns();
      rx = now;
    }
    rx_ns_[idx(i)] = rx;
  }
  return n;
}

SendOutcome run_stream_sender(const TestSpec& spec, uint64_t max_packets, int64_t start_ns,
                              std::span<StreamTarget> targets, const std::atomic<bool>& stop) {
  common::set_min_timer_slack();
  SendOutcome out = spec.mode == Mode::kThroughput
                        ? send_batched(spec, max_packets, start_ns, targets, stop)
                        : send_paced(spec, max_packets, start_ns, targets, stop);
  send_fins(targets, out.sent, stop);
  return out;
}

}  // namespace detwan::perf
