// STAMP Session-Sender: a pacing thread sends at absolute CLOCK_REALTIME deadlines while the
// calling thread collects the reflections with kernel receive timestamps.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/net_address.h"
#include "tools/perf/clock_sync.h"
#include "tools/perf/stamp.h"
#include "tools/perf/stamp_session.h"

namespace detwan::perf {
namespace {

constexpr int64_t kNsPerS = 1'000'000'000;

common::Result<common::UniqueFd> connect_socket(const StampSenderOptions& o, int* family) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(o.port);
  if (const int rc = ::getaddrinfo(o.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("reflector '{}': {}", o.host, ::gai_strerror(rc)));
  }
  common::UniqueFd fd(::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  *family = found->ai_family;
  const bool connected = fd.valid() && ::connect(fd.get(), found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  if (!connected) {
    return common::make_error(
        common::ErrorCode::kIo,
        fmt::format("UDP socket to '{}' port {}: {}", o.host, o.port, std::strerror(errno)));
  }
  const int on = 1;
  const bool v6 = *family == AF_INET6;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) != 0 ||
      ::setsockopt(fd.get(), v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_RECVTCLASS : IP_RECVTOS, &on,
                   sizeof(on)) != 0) {
    return common::make_error(
        common::ErrorCode::kIo,
        fmt::format("socket options (timestamps, TOS): {}", std::strerror(errno)));
  }
  if (o.dscp >= 0) {
    const int tos = o.dscp << 2;
    if (::setsockopt(fd.get(), v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &tos,
                     sizeof(tos)) != 0) {
      return common::make_error(common::ErrorCode::kIo,
                                fmt::format("DSCP {}: {}", o.dscp, std::strerror(errno)));
    }
  }
  return fd;
}

// The pacing thread: packet i leaves at start + i * interval (absolute, so no drift).
struct Pacer {
  const StampSenderOptions* options = nullptr;
  int fd = -1;
  size_t size_bytes = stamp::kBaseBytes;
  int64_t start_ns = 0;
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> send_errors{0};
  std::atomic<int64_t> last_send_monotonic_ns{0};
  std::atomic<bool> done{false};

  void run() {
    common::set_min_timer_slack();
    const common::MonotonicClock mono;
    std::vector<uint8_t> buf(size_bytes);
    stamp::LocalClockState clock = stamp::read_local_clock(options->timestamp);
    int64_t clock_read_ns = realtime_now_ns();
    for (uint64_t i = 0; i < options->count; ++i) {
      const int64_t deadline_ns = start_ns + static_cast<int64_t>(i) * options->interval_ns;
      const timespec ts{static_cast<time_t>(deadline_ns / kNsPerS),
                        static_cast<long>(deadline_ns % kNsPerS)};
      while (::clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
      int64_t t1_ns = realtime_now_ns();
      if (t1_ns - clock_read_ns > kNsPerS) {  // adjtimex() once a second is plenty
        clock = stamp::read_local_clock(options->timestamp);
        clock_read_ns = t1_ns;
        t1_ns = realtime_now_ns();
      }
      stamp::SenderPacket p;
      p.seq = static_cast<uint32_t>(i);
      p.timestamp = stamp::encode_timestamp(options->timestamp, t1_ns, clock.tai_offset_s);
      p.error_estimate = stamp::encode_error_estimate(clock.estimate);
      p.ssid = options->ssid;
      (void)stamp::encode_sender(p, buf.data(), buf.size(), buf.size());
      if (options->dscp >= 0) {
        (void)stamp::write_cos_tlv(buf.data(), buf.size(), stamp::kBaseBytes,
                                   static_cast<uint8_t>(options->dscp));
      }
      if (::send(fd, buf.data(), buf.size(), 0) < 0) {
        send_errors.fetch_add(1, std::memory_order_relaxed);
      } else {
        sent.fetch_add(1, std::memory_order_relaxed);
      }
      last_send_monotonic_ns.store(mono.now_ns(), std::memory_order_release);
    }
    done.store(true, std::memory_order_release);
  }
};

// Everything the receive loop accumulates.
struct Collector {
  explicit Collector(const StampSenderOptions& o)
      : options(o), seen((o.count + 63) / 64, 0), local(stamp::read_local_clock(o.timestamp)) {}

  void on_reply(const uint8_t* buf, size_t size, int64_t t4_ns, int tos) noexcept {
    stamp::ReflectorPacket r;
    if (stamp::decode_reflector(buf, size, &r) != stamp::DecodeStatus::kOk) {
      ++result.malformed;
      return;
    }
    // SSID 0: a TWAMP Light reflector (MBZ there), which cannot echo it.
    if (r.ssid != options.ssid && r.ssid != 0) {
      ++result.foreign_ssid;
      return;
    }
    if (r.sender_seq >= options.count) {
      ++result.malformed;
      return;
    }
    uint64_t& word = seen[r.sender_seq / 64];
    const uint64_t bit = uint64_t{1} << (r.sender_seq % 64);
    if ((word & bit) != 0) {
      ++result.duplicates;
      return;
    }
    word |= bit;
    ++result.received;
    if (r.seq != r.sender_seq) result.stateful_reflector = true;
    max_reflector_seq = std::max<uint64_t>(max_reflector_seq, r.seq);

    const stamp::ErrorEstimate reflector = stamp::decode_error_estimate(r.error_estimate);
    const bool own_ptp = options.timestamp == StampTimestamp::kPtp;
    const int64_t t1 = stamp::decode_timestamp(own_ptp, r.sender_timestamp, local.tai_offset_s);
    const int64_t t2 =
        stamp::decode_timestamp(reflector.ptp, r.receive_timestamp, local.tai_offset_s);
    const int64_t t3 = stamp::decode_timestamp(reflector.ptp, r.timestamp, local.tai_offset_s);
    rtt.record((t4_ns - t1) - (t3 - t2));  // never clamped: a negative rtt shows a broken clock
    (void)clock_sync.add(t1, t2, t3, t4_ns);
    const int64_t forward_raw = t2 - t1;
    forward.record(forward_raw);
    reverse.record(t4_ns - t3);
    if (have_last && r.sender_seq == last_seq + 1) ipdv.record(forward_raw - last_forward_raw);
    have_last = true;
    last_seq = r.sender_seq;
    last_forward_raw = forward_raw;

    result.reflector_error_estimate_ns = stamp::error_estimate_ns(reflector);
    result.reflector_synchronized = reflector.synchronized;
    if (tos >= 0) result.dscp_received = tos >> 2;
    result.sender_ttl_at_reflector = r.sender_ttl;
    result.reply_bytes = static_cast<uint32_t>(size);
    stamp::CosValue cos;
    if (options.dscp >= 0 && stamp::find_cos_tlv(buf, size, &cos)) {
      result.dscp_at_reflector = cos.dscp2;
    }
  }

  const StampSenderOptions& options;
  std::vector<uint64_t> seen;  // one bit per sender sequence number
  stamp::LocalClockState local;
  StampSenderResult result;
  common::LogLinearHistogram rtt, forward, reverse, ipdv;
  ClockSync clock_sync;
  uint64_t max_reflector_seq = 0;
  uint32_t last_seq = 0;
  int64_t last_forward_raw = 0;
  bool have_last = false;
};

}  // namespace

common::Result<StampSenderResult> run_stamp_session(const StampSenderOptions& options) {
  if (options.count == 0 || options.count > (uint64_t{1} << 32)) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("count {}: must be 1..2^32", options.count));
  }
  int family = 0;
  auto fd = connect_socket(options, &family);
  if (!fd) return std::unexpected(fd.error());

  Collector collector(options);
  Pacer pacer;
  pacer.options = &options;
  pacer.fd = fd->get();
  pacer.size_bytes = std::max<size_t>(options.size_bytes, stamp::kBaseBytes);
  if (options.dscp >= 0) {  // room for the Class of Service TLV
    pacer.size_bytes = std::max(pacer.size_bytes,
                                stamp::kBaseBytes + stamp::kTlvHeaderBytes + stamp::kCosValueBytes);
  }
  pacer.start_ns = realtime_now_ns() + 1'000'000;
  std::thread pacing([&pacer] { pacer.run(); });

  const common::MonotonicClock mono;
  std::vector<uint8_t> buf(65536);
  alignas(cmsghdr) uint8_t control[256];
  while (collector.result.received < options.count) {
    if (pacer.done.load(std::memory_order_acquire) &&
        mono.now_ns() - pacer.last_send_monotonic_ns.load(std::memory_order_acquire) >
            options.timeout_ns) {
      break;
    }
    pollfd pfd{fd->get(), POLLIN, 0};
    if (::poll(&pfd, 1, 20) <= 0) continue;
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd->get(), &msg, MSG_DONTWAIT);
    if (n < 0) continue;  // ECONNREFUSED (nobody at the port yet) or EAGAIN
    int64_t t4_ns = 0;
    int tos = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts{};
        std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
        t4_ns = int64_t{ts.tv_sec} * kNsPerS + ts.tv_nsec;
      } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
        tos = *CMSG_DATA(c);
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
        std::memcpy(&tos, CMSG_DATA(c), sizeof(int));
      }
    }
    if (t4_ns == 0) t4_ns = realtime_now_ns();
    collector.on_reply(buf.data(), static_cast<size_t>(n), t4_ns, tos);
  }
  pacing.join();

  StampSenderResult r = std::move(collector.result);
  r.target = common::join_host_port(options.host, options.port);
  r.ssid = options.ssid;
  r.timestamp = options.timestamp;
  r.sent = pacer.sent.load();
  r.send_errors = pacer.send_errors.load();
  r.lost = r.sent > r.received ? r.sent - r.received : 0;
  if (r.stateful_reflector) {
    // The reflector numbered what it received: max reflector seq + 1 of them got there (a
    // reverse loss of the very last reflections counts as forward loss: nothing tells them
    // apart).
    const uint64_t reached =
        std::clamp<uint64_t>(collector.max_reflector_seq + 1, r.received, r.sent);
    r.forward_lost = r.sent - reached;
    r.reverse_lost = reached - r.received;
  }
  const ClockSync& sync = collector.clock_sync;
  r.clock_valid = sync.valid();
  r.clock_offset_ns = sync.offset_ns();
  r.clock_error_ns = sync.error_ns();
  r.correction_ns = sync.correction_ns(options.clock);
  r.clock_corrected =
      r.clock_valid && (options.clock == ClockMode::kEstimate ||
                        (options.clock == ClockMode::kAuto && r.correction_ns != 0));
  r.dscp_sent = options.dscp >= 0 ? options.dscp : 0;
  r.rtt_ns = summarize(collector.rtt);
  r.owd_forward_ns = summarize(collector.forward, r.correction_ns);
  r.owd_reverse_ns = summarize(collector.reverse, -r.correction_ns);
  r.ipdv_forward_ns = summarize(collector.ipdv);
  return r;
}

boost::json::object stamp_result_to_json(const StampSenderResult& r) {
  auto optional_u64 = [](const std::optional<uint64_t>& v) -> boost::json::value {
    return v ? boost::json::value(*v) : boost::json::value(nullptr);
  };
  auto optional_int = [](const std::optional<int>& v) -> boost::json::value {
    return v ? boost::json::value(*v) : boost::json::value(nullptr);
  };
  boost::json::object o;
  o["schema"] = "detwan-perf-stamp";
  o["version"] = 1;
  o["target"] = r.target;
  o["ssid"] = r.ssid;
  o["timestamp_format"] = r.timestamp == StampTimestamp::kPtp ? "ptp" : "ntp";
  o["sent"] = r.sent;
  o["received"] = r.received;
  o["lost"] = r.lost;
  o["forward_lost"] = optional_u64(r.forward_lost);
  o["reverse_lost"] = optional_u64(r.reverse_lost);
  o["reflector_stateful"] = r.stateful_reflector;
  o["duplicates"] = r.duplicates;
  o["malformed"] = r.malformed;
  o["foreign_ssid"] = r.foreign_ssid;
  o["send_errors"] = r.send_errors;
  o["clock_offset_ns"] = r.clock_valid ? boost::json::value(r.clock_offset_ns) : nullptr;
  o["clock_error_ns"] = r.clock_valid ? boost::json::value(r.clock_error_ns) : nullptr;
  o["clock_corrected"] = r.clock_corrected;
  o["reflector_error_estimate_ns"] =
      r.reflector_error_estimate_ns ? boost::json::value(*r.reflector_error_estimate_ns) : nullptr;
  o["reflector_synchronized"] =
      r.reflector_synchronized ? boost::json::value(*r.reflector_synchronized) : nullptr;
  o["dscp_sent"] = r.dscp_sent;
  o["dscp_received"] = optional_int(r.dscp_received);
  o["dscp_at_reflector"] = optional_int(r.dscp_at_reflector);
  o["sender_ttl_at_reflector"] = optional_int(r.sender_ttl_at_reflector);
  o["reply_bytes"] = r.reply_bytes;
  o["rtt_ns"] = distribution_to_json(r.rtt_ns);
  o["owd_forward_ns"] = distribution_to_json(r.owd_forward_ns);
  o["owd_reverse_ns"] = distribution_to_json(r.owd_reverse_ns);
  o["ipdv_forward_ns"] = distribution_to_json(r.ipdv_forward_ns);
  return o;
}

void print_stamp_table(const StampSenderResult& r, std::FILE* out) {
  auto opt = [](const std::optional<uint64_t>& v) {
    return v ? std::to_string(*v) : std::string("n/a");
  };
  fmt::print(out, "STAMP {} ssid {} ({} timestamps)\n", r.target, r.ssid,
             r.timestamp == StampTimestamp::kPtp ? "PTP" : "NTP");
  // The split needs a stateful reflector whose numbering shows it (some forward loss).
  fmt::print(out, "  sent {}  received {}  lost {}  (forward {}, reverse {})\n", r.sent, r.received,
             r.lost, opt(r.forward_lost), opt(r.reverse_lost));
  fmt::print(out, "  duplicates {}  malformed {}  foreign ssid {}  send errors {}\n", r.duplicates,
             r.malformed, r.foreign_ssid, r.send_errors);
  if (r.clock_valid) {
    fmt::print(out, "  clock offset {:.3f} us +- {:.3f} us ({})\n", r.clock_offset_ns / 1e3,
               r.clock_error_ns / 1e3,
               r.clock_corrected ? "one-way delays corrected" : "not corrected");
  }
  if (r.reflector_error_estimate_ns) {
    fmt::print(out, "  reflector clock: {}, error estimate {:.3f} us\n",
               *r.reflector_synchronized ? "synchronised" : "not synchronised",
               static_cast<double>(*r.reflector_error_estimate_ns) / 1e3);
  }
  fmt::print(out, "  DSCP sent {}, on reflections {}, at the reflector {}\n", r.dscp_sent,
             r.dscp_received ? std::to_string(*r.dscp_received) : "?",
             r.dscp_at_reflector ? std::to_string(*r.dscp_at_reflector) : "?");
  if (r.received == 0) return;
  fmt::print(out, "  {:<16}{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}{:>12}\n", "(us)", "count", "min",
             "p50", "p90", "p99", "p99.9", "max");
  auto row = [out](const char* name, const Distribution& d) {
    fmt::print(out, "  {:<16}{:>10}{:>12.3f}{:>12.3f}{:>12.3f}{:>12.3f}{:>12.3f}{:>12.3f}\n", name,
               d.count, d.min / 1e3, d.p50 / 1e3, d.p90 / 1e3, d.p99 / 1e3, d.p99_9 / 1e3,
               d.max / 1e3);
  };
  row("rtt", r.rtt_ns);
  row("owd forward", r.owd_forward_ns);
  row("owd reverse", r.owd_reverse_ns);
  row("ipdv forward", r.ipdv_forward_ns);
}

int run_stamp_sender(const StampSenderOptions& options) {
  auto result = run_stamp_session(options);
  if (!result) {
    std::fprintf(stderr, "detwan-perf: %s\n", result.error().describe().c_str());
    return result.error().code == common::ErrorCode::kInvalidArgument ? 2 : 1;
  }
  if (options.json) {
    std::printf("%s\n", boost::json::serialize(stamp_result_to_json(*result)).c_str());
  } else {
    print_stamp_table(*result, stdout);
  }
  std::fflush(stdout);
  if (result->received == 0) {
    std::fprintf(stderr,
                 "detwan-perf: no reflection from %s within %g s: is a STAMP reflector running?\n",
                 result->target.c_str(), static_cast<double>(options.timeout_ns) / 1e9);
    return 1;
  }
  return 0;
}

}  // namespace detwan::perf
