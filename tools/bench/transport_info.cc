// detwan-bench transport info: the protocol's bytes per data datagram, measured on the wire.
//
// A relay socket sits between two endpoints of the backend on 127.0.0.1 and records every
// datagram the client sends. The client sends one message of pseudo-random bytes; for each
// recorded datagram the longest run of message bytes it carries is found, and the largest
// datagram's remainder is the per-datagram overhead (header + anything else that is not payload).
// So the figure always matches the protocol as built, whatever its header layout.
// If the backend cannot run (not built, no io_uring), the layout in transport/proto/wire.h is
// used and "source" says "assumed".
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/net_address.h"
#include "tools/bench/transport_bench.h"
#include "tools/bench/transport_report.h"
#include "transport/proto/wire.h"
#include "transport/registry.h"

namespace detwan::bench {
namespace {

namespace json = boost::json;
using common::Result;

// For when it cannot be measured (backend not usable): the DATA datagram's layout as the
// protocol declares it (DATA's short header).
constexpr int kAssumedHeaderBytes = static_cast<int>(transport::proto::wire::kDataHeaderBytes);
constexpr int kIpUdpBytes = 28;     // IPv4 20 + UDP 8
constexpr int kEthernetBytes = 14;  // what detwan-wanem's rate limiter adds per frame
constexpr size_t kProbeMessageBytes = 256 * 1024;
constexpr size_t kMatchBytes = 32;

struct Measured {
  int header_bytes = 0;
  int datagram_bytes = 0;
  size_t datagrams = 0;
};

// Longest run of `message` bytes inside `d`, starting at some offset < 256 of d.
size_t payload_run(const std::vector<std::byte>& d, const std::vector<std::byte>& message) {
  size_t best = 0;
  for (size_t h = 0; h + kMatchBytes <= d.size() && h < 256; ++h) {
    auto it = std::search(message.begin(), message.end(), d.begin() + static_cast<ptrdiff_t>(h),
                          d.begin() + static_cast<ptrdiff_t>(h + kMatchBytes));
    if (it == message.end()) continue;
    size_t run = 0;
    auto off = static_cast<size_t>(it - message.begin());
    while (h + run < d.size() && off + run < message.size() && d[h + run] == message[off + run]) {
      ++run;
    }
    best = std::max(best, run);
    if (run >= kMatchBytes) break;  // the payload starts here; later offsets only shorten it
  }
  return best;
}

Result<Measured> measure(const InfoOptions& o) {
  transport::EndpointOptions endpoint_options;
  endpoint_options.security = o.security;
  auto server_ep = transport::make_endpoint(o.backend, endpoint_options);
  if (!server_ep) return std::unexpected(server_ep.error());
  auto addr = (*server_ep)->listen("127.0.0.1:0");
  if (!addr) return std::unexpected(addr.error());
  const auto listening = common::parse_host_port(*addr);
  if (!listening) return std::unexpected(listening.error());
  sockaddr_in server_addr{};
  server_addr.sin_family = AF_INET;
  server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  server_addr.sin_port = htons(listening->port);

  const int front = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int back = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in relay{};
  relay.sin_family = AF_INET;
  relay.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(relay);
  auto close_fds = [&] {
    if (front >= 0) ::close(front);
    if (back >= 0) ::close(back);
  };
  if (front < 0 || back < 0 || ::bind(front, reinterpret_cast<sockaddr*>(&relay), len) != 0 ||
      ::getsockname(front, reinterpret_cast<sockaddr*>(&relay), &len) != 0 ||
      ::connect(back, reinterpret_cast<sockaddr*>(&server_addr), sizeof(server_addr)) != 0) {
    close_fds();
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("relay sockets: {}", std::strerror(errno)));
  }
  std::mutex mutex;
  std::vector<std::vector<std::byte>> recorded;
  std::atomic<bool> stop{false};
  std::thread relay_thread([&] {
    std::vector<std::byte> buf(65536);
    sockaddr_in client{};
    socklen_t client_len = 0;
    pollfd fds[2] = {{front, POLLIN, 0}, {back, POLLIN, 0}};
    while (!stop.load(std::memory_order_relaxed)) {
      if (::poll(fds, 2, 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        client_len = sizeof(client);
        const ssize_t n = ::recvfrom(front, buf.data(), buf.size(), 0,
                                     reinterpret_cast<sockaddr*>(&client), &client_len);
        if (n > 0) {
          {
            std::lock_guard lock(mutex);
            recorded.emplace_back(buf.begin(), buf.begin() + n);
          }
          ::send(back, buf.data(), static_cast<size_t>(n), 0);
        }
      }
      if ((fds[1].revents & POLLIN) && client_len != 0) {
        const ssize_t n = ::recv(back, buf.data(), buf.size(), 0);
        if (n > 0) {
          ::sendto(front, buf.data(), static_cast<size_t>(n), 0,
                   reinterpret_cast<sockaddr*>(&client), client_len);
        }
      }
    }
  });

  std::vector<std::byte> message(kProbeMessageBytes);
  uint64_t x = 0x243F6A8885A308D3ULL;
  for (auto& b : message) {  // xorshift: no 32-byte window repeats
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x >> 24);
  }
  Result<std::unique_ptr<transport::Channel>> accepted =
      common::make_error(common::ErrorCode::kInternal, "not accepted");
  std::thread acceptor([&] { accepted = (*server_ep)->accept(10'000'000'000); });
  transport::ChannelOptions copts;
  copts.mtu_bytes = o.mtu_bytes;
  auto client_ep = transport::make_endpoint(o.backend, endpoint_options);
  Result<std::unique_ptr<transport::Channel>> client =
      std::unexpected(client_ep ? common::Error{} : client_ep.error());
  if (client_ep) {
    client =
        (*client_ep)
            ->connect(fmt::format("127.0.0.1:{}", ntohs(relay.sin_port)), copts, 10'000'000'000);
  }
  acceptor.join();
  Result<void> outcome;
  if (!client)
    outcome = std::unexpected(client.error());
  else if (!accepted)
    outcome = std::unexpected(accepted.error());
  if (outcome) {
    auto got = (*accepted)->recv();
    auto sent = (*client)->send(message);
    auto r = await_result(got, 20'000'000'000, "probe message");
    if (!r)
      outcome = std::unexpected(r.error());
    else if (*r != message)
      outcome = common::make_error(common::ErrorCode::kInternal, "probe message arrived altered");
    (void)await_result(sent, 5'000'000'000, "probe message acknowledgement");
    (*client)->close();
    (*accepted)->close();
  }
  if (client) client->reset();
  if (accepted) accepted->reset();
  stop = true;
  relay_thread.join();
  close_fds();
  if (!outcome) return std::unexpected(outcome.error());

  // Overhead of the largest (full) datagrams. The most common value wins: a header byte that
  // happens to equal the message byte before the payload makes one datagram look a byte
  // shorter (1 in 256), so the minimum or any single datagram would be wrong now and then.
  Measured m;
  m.datagrams = recorded.size();
  for (const auto& d : recorded) {
    m.datagram_bytes = std::max(m.datagram_bytes, static_cast<int>(d.size()));
  }
  std::map<int, int> overheads;
  for (const auto& d : recorded) {
    if (static_cast<int>(d.size()) != m.datagram_bytes) continue;
    const size_t run = payload_run(d, message);
    if (run >= kMatchBytes) ++overheads[m.datagram_bytes - static_cast<int>(run)];
  }
  if (overheads.empty()) {
    return common::make_error(common::ErrorCode::kInternal,
                              "no recorded datagram carried the probe message's bytes");
  }
  m.header_bytes = std::max_element(overheads.begin(), overheads.end(), [](auto& a, auto& b) {
                     return a.second < b.second;
                   })->first;
  return m;
}

}  // namespace

int run_info(const InfoOptions& o) {
  if (o.mtu_bytes < 576 || o.mtu_bytes > 65535) {
    std::fprintf(stderr, "detwan-bench transport info: --mtu must be in [576, 65535]\n");
    return 2;
  }
  const transport::BackendInfo backend = transport::backend_info(o.backend);
  json::object doc{{"backend", o.backend},
                   {"mtu_bytes", o.mtu_bytes},
                   {"udp_payload_bytes", o.mtu_bytes - kIpUdpBytes},
                   {"frame_overhead_bytes", kIpUdpBytes + kEthernetBytes},
                   {"backend_usable", backend.usable},
                   {"reason", nullptr}};
  int header = kAssumedHeaderBytes;
  auto m = backend.usable ? measure(o)
                          : common::make_error(common::ErrorCode::kUnavailable, backend.reason);
  if (m) {
    header = m->header_bytes;
    doc["source"] = "measured";
    doc["datagrams_recorded"] = m->datagrams;
    doc["largest_data_datagram_bytes"] = m->datagram_bytes;
  } else {
    doc["source"] = "assumed";
    doc["reason"] = m.error().describe();
  }
  const int payload = o.mtu_bytes - kIpUdpBytes - header;
  doc["header_bytes"] = header;
  doc["segment_payload_bytes"] = payload;
  doc["wire_bytes_per_datagram"] = o.mtu_bytes + kEthernetBytes;
  doc["payload_share"] = static_cast<double>(payload) / (o.mtu_bytes + kEthernetBytes);
  if (o.json) {
    print_json(doc);
  } else {
    std::printf(
        "%s at MTU %d: %d header bytes (%s), %d payload bytes per %d-byte frame "
        "(%.2f%% of a rate limiter counting Ethernet frames)\n",
        o.backend.c_str(), o.mtu_bytes, header, doc["source"].as_string().c_str(), payload,
        o.mtu_bytes + kEthernetBytes,
        100.0 * static_cast<double>(payload) / (o.mtu_bytes + kEthernetBytes));
  }
  return 0;
}

}  // namespace detwan::bench
