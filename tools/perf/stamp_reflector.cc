// STAMP Session-Reflector (RFC 8762 4.3): one UDP socket (dual stack unless bound to an IPv4
// address), kernel receive timestamps, the sender's TTL and TOS from ancillary data.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "tools/perf/stamp.h"
#include "tools/perf/stamp_session.h"
#include "tools/probe/udp_socket.h"

namespace detwan::perf {
namespace {

[[noreturn]] void fail(common::ErrorCode code, const std::string& what) {
  throw common::Failure(common::Error{code, what + ": " + std::strerror(errno)});
}

void set_int_option(int fd, int level, int name, int value, const char* what) {
  if (::setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    fail(common::ErrorCode::kIo, std::string("setsockopt(") + what + ")");
  }
}

int64_t monotonic_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::string peer_text(const in6_addr& address, uint16_t port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (IN6_IS_ADDR_V4MAPPED(&address)) {
    inet_ntop(AF_INET, &address.s6_addr[12], text, sizeof(text));
    return fmt::format("{}:{}", text, port);
  }
  inet_ntop(AF_INET6, &address, text, sizeof(text));
  return fmt::format("[{}]:{}", text, port);
}

}  // namespace

StampReflector::StampReflector(const StampReflectOptions& options)
    : options_(options),
      sessions_(kMaxSessions),
      rx_buf_(65536),
      tx_buf_(65536),
      limiter_(std::max<uint64_t>(options.rate_per_source_bps, 1),
               std::max<uint64_t>(options.burst_per_source_bytes, 1)) {
  if (options.rate_per_source_bps == 0 || options.burst_per_source_bytes == 0) {
    throw common::Failure(common::Error{
        common::ErrorCode::kInvalidArgument,
        "STAMP reflector: the reply rate and burst per source must be above 0"});
  }
  probe::SocketAddress local;
  if (options.bind.empty()) {
    // Dual stack (:: accepts IPv4 as mapped addresses) where IPv6 exists, else IPv4 only.
    fd_.reset(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (fd_.valid()) {
      set_int_option(fd_.get(), IPPROTO_IPV6, IPV6_V6ONLY, 0, "IPV6_V6ONLY");
      local = probe::parse_address("::", options.port);
    } else {
      local = probe::parse_address("0.0.0.0", options.port);
    }
  } else {
    local = probe::parse_address(options.bind, options.port);
  }
  family_ = local.storage.ss_family;
  if (!fd_.valid()) fd_.reset(::socket(family_, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd_.valid()) fail(common::ErrorCode::kIo, "socket(UDP)");
  const int fd = fd_.get();
  set_int_option(fd, SOL_SOCKET, SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS");
  // IPv4 options also apply to IPv4 packets arriving on a dual-stack IPv6 socket.
  set_int_option(fd, IPPROTO_IP, IP_RECVTTL, 1, "IP_RECVTTL");
  set_int_option(fd, IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS");
  if (family_ == AF_INET6) {
    set_int_option(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT");
    set_int_option(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS");
  }
  const int rcvbuf_bytes = 4 << 20;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf_bytes, sizeof(rcvbuf_bytes)) != 0) {
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof(rcvbuf_bytes));
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&local.storage), local.length) != 0) {
    fail(common::ErrorCode::kIo,
         fmt::format("bind STAMP reflector to '{}' port {}",
                     options.bind.empty() ? "*" : options.bind, options.port));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    fail(common::ErrorCode::kIo, "getsockname");
  }
  port_ = ntohs(family_ == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_.valid()) fail(common::ErrorCode::kIo, "eventfd");
}

StampReflector::~StampReflector() = default;

void StampReflector::stop() noexcept {
  stopping_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof(one));
}

void StampReflector::run(int extra_stop_fd) {
  const common::MonotonicClock clock;
  const int64_t deadline_ns = options_.duration_ns > 0 ? clock.now_ns() + options_.duration_ns : 0;
  alignas(cmsghdr) uint8_t control[256];
  while (!stopping_.load(std::memory_order_acquire)) {
    pollfd fds[3] = {
        {fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}, {extra_stop_fd, POLLIN, 0}};
    int timeout_ms = -1;
    if (deadline_ns > 0) {
      const int64_t left_ns = deadline_ns - clock.now_ns();
      if (left_ns <= 0) break;
      timeout_ms = static_cast<int>(std::min<int64_t>(left_ns / 1'000'000 + 1, 1'000'000));
    }
    const int ready = ::poll(fds, extra_stop_fd >= 0 ? 3 : 2, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail(common::ErrorCode::kIo, "poll on the STAMP socket");
    }
    if (fds[1].revents != 0 || (extra_stop_fd >= 0 && fds[2].revents != 0)) break;
    if ((fds[0].revents & (POLLIN | POLLERR)) == 0) continue;  // recvmsg clears an error
    // Drain a bounded batch, then look at the stop conditions again.
    for (int i = 0; i < 64; ++i) {
      sockaddr_storage from{};
      iovec iov{rx_buf_.data(), rx_buf_.size()};
      msghdr msg{};
      msg.msg_name = &from;
      msg.msg_namelen = sizeof(from);
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT);
      if (n < 0) break;  // EAGAIN, or an ICMP error queued for an earlier reply
      int64_t rx_ns = 0;
      int ttl = -1, tos = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
          timespec ts{};
          std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
          rx_ns = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
        } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
          std::memcpy(&ttl, CMSG_DATA(c), sizeof(int));
        } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
          tos = *CMSG_DATA(c);  // one byte
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) {
          std::memcpy(&ttl, CMSG_DATA(c), sizeof(int));
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
          std::memcpy(&tos, CMSG_DATA(c), sizeof(int));
        }
      }
      if (rx_ns == 0) rx_ns = realtime_now_ns();
      on_datagram(static_cast<size_t>(n), from, msg.msg_namelen, rx_ns, ttl, tos);
    }
  }
}

StampReflector::Session* StampReflector::session_for(const sockaddr_storage& from, uint16_t ssid,
                                                     int64_t now_ns) noexcept {
  in6_addr address{};
  uint16_t port = 0;
  if (from.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&from);
    address.s6_addr[10] = 0xff;
    address.s6_addr[11] = 0xff;
    std::memcpy(&address.s6_addr[12], &v4->sin_addr, 4);
    port = ntohs(v4->sin_port);
  } else {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&from);
    address = v6->sin6_addr;
    port = ntohs(v6->sin6_port);
  }
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over address, port, SSID
  auto mix = [&hash](uint8_t byte) { hash = (hash ^ byte) * 1099511628211ull; };
  for (uint8_t b : address.s6_addr) mix(b);
  mix(static_cast<uint8_t>(port >> 8));
  mix(static_cast<uint8_t>(port));
  mix(static_cast<uint8_t>(ssid >> 8));
  mix(static_cast<uint8_t>(ssid));
  // A full table reuses a session idle for kSessionIdleNs (replacing the key in a used slot
  // keeps every probe chain intact).
  Session* stale = nullptr;
  for (size_t probe = 0; probe < kMaxSessions; ++probe) {
    Session& s = sessions_[(hash + probe) % kMaxSessions];
    if (!s.used) {
      s = Session{address, port, ssid, true, 0, 0, now_ns};
      return &s;
    }
    if (s.port == port && s.ssid == ssid &&
        std::memcmp(&s.address, &address, sizeof(address)) == 0) {
      s.last_seen_ns = now_ns;
      return &s;
    }
    if (stale == nullptr && now_ns - s.last_seen_ns > kSessionIdleNs) stale = &s;
  }
  if (stale != nullptr) *stale = Session{address, port, ssid, true, 0, 0, now_ns};
  return stale;
}

void StampReflector::on_datagram(size_t size, const sockaddr_storage& from, socklen_t from_len,
                                 int64_t rx_ns, int ttl, int tos) noexcept {
  ++counters_.received;
  stamp::SenderPacket request;
  if (stamp::decode_sender(rx_buf_.data(), size, &request) != stamp::DecodeStatus::kOk) {
    ++counters_.malformed_too_short;
    return;
  }
  if (tos >= 0) ++counters_.dscp_received[static_cast<size_t>(tos >> 2) & 63];
  // A reply is never larger than its request (RFC 8762 symmetric size), so the reflector
  // amplifies nothing: a longer request gets a reply of its own size whose bytes past the base
  // are the request's (TLVs or padding); a TWAMP Light request of 41..43 bytes gets the base
  // packet cut to its size (bytes 41..43 are MBZ); a shorter one would need a larger reply and
  // is refused unless answer_short (RFC 8762 4.6: the base packet).
  size_t reply_bytes = size;
  if (size < stamp::kTwampLightReflectorMinBytes) {
    if (!options_.answer_short) {
      ++counters_.refused_short;
      return;
    }
    reply_bytes = stamp::kBaseBytes;
  }
  if (size < stamp::kBaseBytes) ++counters_.twamp_light;
  // The source's reply budget (UDP payload and IP/UDP headers), before any session state moves:
  // a refused request is as if lost on the way in.
  in6_addr source{};
  const bool v4 = from.ss_family == AF_INET ||
                  IN6_IS_ADDR_V4MAPPED(&reinterpret_cast<const sockaddr_in6*>(&from)->sin6_addr);
  if (from.ss_family == AF_INET) {
    source.s6_addr[10] = 0xff;
    source.s6_addr[11] = 0xff;
    std::memcpy(&source.s6_addr[12], &reinterpret_cast<const sockaddr_in*>(&from)->sin_addr, 4);
  } else {
    source = reinterpret_cast<const sockaddr_in6*>(&from)->sin6_addr;
  }
  const uint64_t shared_before = limiter_.shared();
  const auto wire_bytes = static_cast<uint32_t>(reply_bytes + (v4 ? 28 : 48));
  const bool admitted = limiter_.admit(source, wire_bytes, monotonic_now_ns());
  counters_.sources_shared += limiter_.shared() - shared_before;
  if (!admitted) {
    ++counters_.rate_limited;
    return;
  }
  Session* session = session_for(from, request.ssid, rx_ns);
  if (session == nullptr) ++counters_.sessions_overflow;

  stamp::ReflectorPacket reply;
  reply.seq = options_.stateful && session != nullptr ? session->next_seq++ : request.seq;
  if (session != nullptr) ++session->packets;
  reply.ssid = request.ssid;
  reply.sender_seq = request.seq;
  reply.sender_timestamp = request.timestamp;
  reply.sender_error_estimate = request.error_estimate;
  reply.sender_ttl = ttl >= 0 && ttl <= 255 ? static_cast<uint8_t>(ttl) : 255;

  uint8_t* out = tx_buf_.data();
  int requested_dscp = -1;
  if (size > stamp::kBaseBytes) {
    std::memcpy(out + stamp::kBaseBytes, rx_buf_.data() + stamp::kBaseBytes,
                size - stamp::kBaseBytes);
    const stamp::TlvReflectResult tlvs =
        stamp::reflect_tlvs(out, size, tos, options_.honour_dscp);
    if (tlvs.malformed) ++counters_.tlv_malformed;
    requested_dscp = tlvs.requested_dscp;
    if (requested_dscp >= 0 && !options_.honour_dscp) {
      // The reply leaves with the reflector's own DSCP: a request does not pick the class its
      // reply takes through the network (RP = 1 in the TLV says so).
      ++counters_.dscp_not_honoured;
      requested_dscp = -1;
    }
  }

  // adjtimex() state changes slowly: refresh it once a second, not per packet.
  if (rx_ns - clock_read_ns_ > 1'000'000'000 || rx_ns < clock_read_ns_) {
    clock_ = stamp::read_local_clock(options_.timestamp);
    clock_read_ns_ = rx_ns;
  }
  reply.error_estimate = stamp::encode_error_estimate(clock_.estimate);
  reply.receive_timestamp = stamp::encode_timestamp(options_.timestamp, rx_ns, clock_.tai_offset_s);

  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{out, reply_bytes};
  msghdr msg{};
  msg.msg_name = const_cast<sockaddr_storage*>(&from);
  msg.msg_namelen = from_len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (requested_dscp >= 0) {  // Class of Service TLV: the DSCP the sender asked for the reply
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = v4 ? IPPROTO_IP : IPPROTO_IPV6;
    c->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    const int tclass = requested_dscp << 2;
    std::memcpy(CMSG_DATA(c), &tclass, sizeof(int));
  }
  reply.timestamp = stamp::encode_timestamp(options_.timestamp, realtime_now_ns(), clock_.tai_offset_s);
  (void)stamp::encode_reflector_base(reply, out, tx_buf_.size());
  if (::sendmsg(fd_.get(), &msg, 0) < 0) {
    ++counters_.send_errors;
  } else {
    ++counters_.reflected;
  }
}

StampReflectorCounters StampReflector::counters() const {
  StampReflectorCounters c = counters_;
  for (const Session& s : sessions_) {
    if (s.used) c.sessions.push_back({peer_text(s.address, s.port), s.ssid, s.packets});
  }
  return c;
}

boost::json::object StampReflector::counters_json() const {
  const StampReflectorCounters c = counters();
  boost::json::array sessions;
  for (const StampSessionCount& s : c.sessions) {
    sessions.push_back({{"peer", s.peer}, {"ssid", s.ssid}, {"packets", s.packets}});
  }
  boost::json::object dscp;
  for (size_t i = 0; i < c.dscp_received.size(); ++i) {
    if (c.dscp_received[i] != 0) dscp[std::to_string(i)] = c.dscp_received[i];
  }
  return {{"schema", "detwan-perf-stamp-reflector"},
          {"version", 1},
          {"port", port_},
          {"stateful", options_.stateful},
          {"timestamp_format", options_.timestamp == StampTimestamp::kPtp ? "ptp" : "ntp"},
          {"received", c.received},
          {"reflected", c.reflected},
          {"malformed", {{"total", c.malformed()}, {"too_short", c.malformed_too_short}}},
          {"twamp_light", c.twamp_light},
          {"dscp_received", std::move(dscp)},
          {"tlv_malformed", c.tlv_malformed},
          {"send_errors", c.send_errors},
          {"sessions_overflow", c.sessions_overflow},
          {"refused_short", c.refused_short},
          {"rate_limited", c.rate_limited},
          {"sources_shared", c.sources_shared},
          {"dscp_not_honoured", c.dscp_not_honoured},
          {"honour_dscp", options_.honour_dscp},
          {"rate_per_source_bps", options_.rate_per_source_bps},
          {"burst_per_source_bytes", options_.burst_per_source_bytes},
          {"sessions", std::move(sessions)}};
}

int run_stamp_reflect(const StampReflectOptions& options) {
  // SIGINT/SIGTERM end the run through a signalfd, so the counters are printed on the way out.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    std::fprintf(stderr, "detwan-perf: cannot block SIGINT/SIGTERM\n");
    return 1;
  }
  common::UniqueFd signal_fd(::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd.valid()) {
    std::fprintf(stderr, "detwan-perf: signalfd: %s\n", std::strerror(errno));
    return 1;
  }
  StampReflector reflector(options);
  fmt::print(stderr,
             "detwan-perf: STAMP reflector ({}, {} timestamps) listening on UDP port {} (replies "
             "per source up to {} bit/s after {} bytes; DSCP {}; requests under 41 bytes {})\n",
             options.stateful ? "stateful" : "stateless",
             options.timestamp == StampTimestamp::kPtp ? "PTP" : "NTP", reflector.port(),
             options.rate_per_source_bps, options.burst_per_source_bytes,
             options.honour_dscp ? "as the request asks" : "the reflector's own",
             options.answer_short ? "answered with 44" : "refused");
  std::fflush(stderr);
  reflector.run(signal_fd.get());
  if (options.json) {
    std::printf("%s\n", boost::json::serialize(reflector.counters_json()).c_str());
  } else {
    const StampReflectorCounters c = reflector.counters();
    fmt::print(
        "received {}, reflected {}, malformed {}, TWAMP Light (short) {}, sessions {}; refused: "
        "short {}, rate limited {}; DSCP not honoured {}\n",
        c.received, c.reflected, c.malformed(), c.twamp_light, c.sessions.size(), c.refused_short,
        c.rate_limited, c.dscp_not_honoured);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace detwan::perf
