#include "tools/perf/client_path.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <poll.h>

#include "common/net_address.h"
#include "tools/perf/perf_wire.h"

namespace detwan::perf {
namespace json = boost::json;
using common::ErrorCode;
using common::make_error;

namespace {

constexpr int64_t kHelloSpacingNs = 100'000'000;
constexpr int64_t kSyncReplyWaitNs = 200'000'000;  // per initial exchange

constexpr uint64_t kAnySeq = UINT64_MAX;

// Waits up to timeout_ns for a datagram of `kind` and this session; fills *out and *rx_ns.
bool wait_for(ClientPath& path, DatagramReader& reader, Kind kind, uint64_t seq, int64_t timeout_ns,
              Packet* out, int64_t* rx_ns) {
  const int64_t deadline = monotonic_ns() + timeout_ns;
  for (;;) {
    const int n = reader.receive(path.udp->fd());
    for (int i = 0; i < n; ++i) {
      Packet p;
      if (reader.truncated(i) || decode(reader.data(i), reader.size(i), &p) != DecodeResult::kOk) {
        continue;
      }
      if (p.session == path.session && p.kind == kind && (seq == kAnySeq || p.seq == seq)) {
        *out = p;
        *rx_ns = reader.rx_ns(i);
        return true;
      }
    }
    if (n > 0) continue;
    const int64_t left = deadline - monotonic_ns();
    if (left <= 0) return false;
    pollfd p{path.udp->fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left / 1'000'000 + 1, 1, 100)));
  }
}

}  // namespace

json::object clock_message(const char* type, const ClockSync& clock, ClockMode mode) {
  return json::object{{"type", type},
                      {"correction_ns", clock.correction_ns(mode)},
                      {"offset_ns", clock.offset_ns()},
                      {"error_ns", clock.error_ns()}};
}

common::Result<std::unique_ptr<ClientPath>> open_path(const ClientOptions& options,
                                                      const std::string& host) {
  const std::string target = common::join_host_port(host, options.port);
  // A lost SYN is resent after 1 s, then 3 s (Linux): a connect gets at least 3.5 s so that one
  // lost SYN on a lossy path is not "cannot reach", whatever --peer-timeout is.
  constexpr int64_t kMinConnectTimeoutNs = 3'500'000'000;
  auto fd = connect_tcp(host, options.port, std::max(options.peer_timeout_ns, kMinConnectTimeoutNs),
                        options.bind);
  if (!fd) {
    return make_error(fd.error().code, "cannot reach server " + target + ": " + fd.error().message);
  }
  auto path = std::make_unique<ClientPath>(std::move(*fd));
  path->target = target;
  path->report.target = target;
  json::object hello{{"type", "hello"},
                     {"version", kProtocolVersion},
                     {"spec", spec_to_json(options.spec)},
                     {"linger_ns", options.linger_ns}};
  if (auto sent = path->control.send(hello); !sent) {
    return make_error(ErrorCode::kIo, "server " + target + ": " + sent.error().message);
  }
  auto reply = path->control.receive(options.peer_timeout_ns);
  if (!reply) {
    return make_error(reply.error().code,
                      "server " + target + " did not accept the test: " + reply.error().message);
  }
  auto type = get_string(*reply, "type");
  if (type && *type == "error") {
    auto message = get_string(*reply, "message");
    return make_error(ErrorCode::kInvalidArgument,
                      "server " + target + " rejected the test: " +
                          (message ? *message : std::string("(no message)")));
  }
  auto session = get_int(*reply, "session");
  auto udp_port = get_int(*reply, "udp_port");
  auto token_text = get_string(*reply, "token");
  const std::optional<HelloToken> token =
      token_text ? parse_token(*token_text) : std::optional<HelloToken>{};
  if (!type || *type != "accept" || !session || !udp_port || *udp_port <= 0 || *udp_port > 65535 ||
      *session < 0 || *session > 0xFFFFFFFFLL || !token) {
    return make_error(ErrorCode::kIo, "server " + target + ": unexpected reply to the hello");
  }
  path->session = static_cast<uint32_t>(*session);

  auto server = peer_address(path->control.fd());
  if (!server) return std::unexpected(server.error());
  if (server->storage.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&server->storage)->sin_port =
        htons(static_cast<uint16_t>(*udp_port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&server->storage)->sin6_port =
        htons(static_cast<uint16_t>(*udp_port));
  }
  try {
    const int family = server->storage.ss_family;
    path->udp.emplace(family);
    path->udp->set_receive_buffer(kReceiveBufferBytes);
    path->udp->enable_timestamps();
    if (options.spec.dscp >= 0) path->udp->set_dscp(options.spec.dscp, family);
    if (!options.bind.empty()) {
      const probe::SocketAddress local = probe::parse_address(options.bind, 0);
      if (local.storage.ss_family != family) {
        return make_error(ErrorCode::kInvalidArgument,
                          "--bind " + options.bind + ": not the address family of " + target);
      }
      path->udp->bind_to(local);
    }
    // Connected: the kernel drops datagrams from other sources before they reach us.
    if (::connect(path->udp->fd(), reinterpret_cast<const sockaddr*>(&server->storage),
                  server->length) != 0) {
      return make_error(ErrorCode::kIo,
                        "connect UDP to " + format_address(*server) + ": " + std::strerror(errno));
    }
  } catch (const common::Failure& e) {
    return std::unexpected(e.error());
  }

  // UDP hello until acknowledged: proves the path and lets the server learn our port (through
  // NAT); the token shows the hello comes from the control connection's owner.
  DatagramReader reader(8, 512);
  const int64_t give_up = monotonic_ns() + options.peer_timeout_ns;
  for (uint64_t seq = 0;; ++seq) {
    (void)send_packet(path->udp->fd(), nullptr, 0,
                      make_hello(path->session, seq, realtime_ns(), *token), kHeaderBytes);
    Packet ack;
    int64_t rx = 0;
    // Any hello's ack will do (an earlier one may arrive late).
    const int64_t wait = std::clamp<int64_t>(give_up - monotonic_ns(), 0, kHelloSpacingNs);
    if (wait_for(*path, reader, Kind::kHelloAck, kAnySeq, wait, &ack, &rx)) break;
    if (monotonic_ns() >= give_up) {
      return make_error(ErrorCode::kTimeout,
                        fmt::format("server {}: no UDP reply to the hello within {:.1f} s (is "
                                    "UDP port {} blocked?)",
                                    target, options.peer_timeout_ns / 1e9, *udp_port));
    }
  }
  return path;
}

common::Result<void> initial_sync(ClientPath& path, const ClientOptions& options, int exchanges) {
  DatagramReader reader(8, std::max<size_t>(options.spec.size_bytes, 512));
  for (int k = 0; k < exchanges; ++k) {
    const uint64_t seq = path.next_sync_seq++;
    const int64_t t1 = realtime_ns();
    (void)send_packet(path.udp->fd(), nullptr, 0,
                      Packet{Kind::kSyncRequest, path.session, seq, t1, 0, 0}, kHeaderBytes);
    Packet reply;
    int64_t t4 = 0;
    if (wait_for(path, reader, Kind::kSyncReply, seq, kSyncReplyWaitNs, &reply, &t4)) {
      (void)path.clock.add(t1, reply.t_b, reply.t_c, t4);
    }
  }
  if (!path.clock.valid()) {
    return make_error(ErrorCode::kTimeout,
                      "server " + path.target + ": no reply to the clock sync exchanges");
  }
  return {};
}

}  // namespace detwan::perf
