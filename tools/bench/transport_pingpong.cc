// detwan-bench transport pingpong: one message in flight, echoed straight back, over 127.0.0.1;
// either a detwan channel (both ends in this process, each with its own endpoint and progress
// thread) or plain blocking UDP sockets (--raw-udp), so the two are measured by the same code
// in the same run. `--backend NAME:CONFIG` passes CONFIG as the endpoints' backend_config,
// e.g. `--backend udp:busy_poll_us=50` (both endpoints spin up to 50 us before sleeping).
// `--progress` says who runs the loop: `callback` (default) sends the next ping from the reply's
// callback on the client's progress thread; `wait` has the calling thread wait for each reply,
// as a blocking client does (two thread hand-overs per round trip); `inline` gives neither end
// a progress thread: the client's thread and the echo's thread each run their endpoint's loop
// (Endpoint::progress), as the plain UDP baseline's two threads each block on their socket.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tools/bench/transport_bench.h"
#include "tools/bench/transport_report.h"
#include "transport/registry.h"

namespace detwan::bench {
namespace {

namespace json = boost::json;
using common::Result;

constexpr int64_t kReplyTimeoutNs = 5'000'000'000;

// Echoes every message back on the server channel, from its progress thread.
struct Echo {
  transport::Channel* channel = nullptr;
  void arm() {
    channel->recv_async([this](Result<std::vector<std::byte>> r) {
      if (!r) return;  // closed: the run is over
      auto message = std::make_shared<std::vector<std::byte>>(std::move(*r));
      channel->send_async(*message, [message](Result<void>) {});
      arm();
    });
  }
};

// Client side: sends a ping, and from the reply's callback (progress thread) records the round
// trip and sends the next one. `done` gets "" after the last reply, or the channel's error.
struct Pinger {
  transport::Channel* channel = nullptr;
  std::span<const std::byte> message;  // constant: valid until every send completed
  int warmup = 0;
  int total = 0;
  std::vector<int64_t>* rtt_ns = nullptr;
  int index = 0;
  int64_t sent_ns = 0;
  int64_t start_ns = 0;
  bool finished = false;  // progress thread only, after the first ping
  std::promise<std::string> done;

  void ping() {
    sent_ns = monotonic_ns();
    if (index == warmup) start_ns = sent_ns;
    // The receive is posted first so the reply always finds it.
    channel->recv_async([this](Result<std::vector<std::byte>> r) { on_reply(std::move(r)); });
    channel->send_async(message, [](Result<void>) {});
  }
  void on_reply(Result<std::vector<std::byte>> r) {
    if (finished) return;
    if (!r) return finish(fmt::format("echo {}: {}", index, r.error().describe()));
    if (index >= warmup) rtt_ns->push_back(monotonic_ns() - sent_ns);
    if (++index == total) return finish("");
    ping();
  }
  void finish(std::string error) {
    finished = true;
    done.set_value(std::move(error));
  }
};

struct Samples {
  std::vector<int64_t> rtt_ns;
  uint64_t lost = 0;
  int64_t wall_ns = 0;
  std::string error;
};

// warmup + count round trips driven by the calling thread: `round_trip()` sends one ping and
// returns "" once its reply is back, or what went wrong. RTTs after the warm-up.
template <typename RoundTrip>
void timed_round_trips(const PingPongOptions& o, Samples& out, RoundTrip&& round_trip) {
  out.rtt_ns.reserve(static_cast<size_t>(o.count));
  int64_t start_ns = monotonic_ns();
  for (int i = 0; i < o.warmup + o.count; ++i) {
    const int64_t t0 = monotonic_ns();
    if (i == o.warmup) start_ns = t0;
    if (std::string error = round_trip(); !error.empty()) {
      out.error = fmt::format("echo {}: {}", i, error);
      return;
    }
    if (i >= o.warmup) out.rtt_ns.push_back(monotonic_ns() - t0);
  }
  out.wall_ns = monotonic_ns() - start_ns;
}

Samples detwan_pingpong(const PingPongOptions& o, std::string& describe) {
  Samples out;
  const std::vector<std::byte> message(o.size_bytes, std::byte{0x5a});
  Echo echo;      // outlive the channels and endpoints, whose callbacks use them
  Pinger pinger;
  std::unique_ptr<transport::Channel> server_channel;
  transport::EndpointOptions endpoint_options;
  const auto [backend, config] = split_backend(o.backend);
  endpoint_options.backend_config = config;
  endpoint_options.security = o.security;
  auto server_ep = transport::make_endpoint(backend, endpoint_options);
  if (!server_ep) return {{}, 0, 0, server_ep.error().describe()};
  auto addr = (*server_ep)->listen("127.0.0.1:0");
  if (!addr) return {{}, 0, 0, addr.error().describe()};
  Result<std::unique_ptr<transport::Channel>> accepted =
      common::make_error(common::ErrorCode::kInternal, "not accepted");
  std::thread acceptor([&] { accepted = (*server_ep)->accept(10'000'000'000); });
  auto client_ep = transport::make_endpoint(backend, endpoint_options);
  Result<std::unique_ptr<transport::Channel>> client = std::unexpected(
      client_ep ? common::Error{} : client_ep.error());
  if (client_ep) client = (*client_ep)->connect(*addr, transport::ChannelOptions{}, 10'000'000'000);
  acceptor.join();
  if (!client) return {{}, 0, 0, client.error().describe()};
  if (!accepted) return {{}, 0, 0, accepted.error().describe()};
  server_channel = std::move(*accepted);
  echo.channel = server_channel.get();
  echo.arm();
  describe = (*client)->describe();

  // The next ping leaves from the reply's completion callback, on the client's progress thread
  // (documented use of the API: callbacks may call send_async / recv_async). Handing every reply
  // to this thread and posting the next ping from here would add two thread wakeups (a futex
  // and the endpoint's eventfd) per round trip that plain UDP does not pay; the measurement is
  // the transport's round trip, not that hand-over.
  if (o.progress == "wait") {
    // A blocking client: this thread posts each ping and sleeps until the reply's callback (on
    // the progress thread) fulfils the future.
    transport::Channel& channel = **client;
    timed_round_trips(o, out, [&]() -> std::string {
      auto reply = channel.recv();
      channel.send_async(std::span<const std::byte>(message), [](Result<void>) {});
      if (reply.wait_for(std::chrono::nanoseconds(kReplyTimeoutNs)) != std::future_status::ready) {
        return "no reply within 5 s";
      }
      auto got = reply.get();
      return got ? std::string() : got.error().describe();
    });
  } else {
    pinger.channel = client->get();
    pinger.message = std::span<const std::byte>(message);
    pinger.warmup = o.warmup;
    pinger.total = o.warmup + o.count;
    pinger.rtt_ns = &out.rtt_ns;
    out.rtt_ns.reserve(static_cast<size_t>(o.count));
    auto finished = pinger.done.get_future();
    pinger.ping();
    const int64_t guard_ns = kReplyTimeoutNs + int64_t{o.warmup + o.count} * 1'000'000;
    if (finished.wait_for(std::chrono::nanoseconds(guard_ns)) != std::future_status::ready) {
      out.error = fmt::format("ping-pong did not finish within {} ms", guard_ns / 1'000'000);
      (*client)->close();  // fails the pending receive, which completes `finished`
    }
    const std::string error = finished.get();
    if (out.error.empty()) out.error = error;
    out.wall_ns = monotonic_ns() - pinger.start_ns;
  }
  (*client)->close();
  server_channel->close();
  client->reset();
  server_channel.reset();
  return out;
}

// Neither end has a progress thread: the echo's endpoint is owned and driven by its own thread
// (listen, accept, then Endpoint::progress, echoing from the receive callback), the client's by
// this thread, which waits for each reply inside Endpoint::progress.
Samples inline_pingpong(const PingPongOptions& o, std::string& describe) {
  Samples out;
  const std::vector<std::byte> message(o.size_bytes, std::byte{0x5a});
  transport::EndpointOptions endpoint_options;
  const auto [backend, config] = split_backend(o.backend);
  endpoint_options.backend_config = config;
  endpoint_options.security = o.security;
  endpoint_options.inline_progress = true;
  std::promise<Result<std::string>> listening;
  auto listen_address = listening.get_future();
  std::atomic<bool> stop{false};
  std::string echo_error;
  std::thread echo_thread([&] {
    Echo echo;  // outlives the endpoint, whose shutdown runs its pending receive's callback
    auto endpoint = transport::make_endpoint(backend, endpoint_options);
    if (!endpoint) return listening.set_value(std::unexpected(endpoint.error()));
    auto address = (*endpoint)->listen("127.0.0.1:0");
    listening.set_value(address);
    if (!address) return;
    auto accepted = (*endpoint)->accept(10'000'000'000);
    if (!accepted) {
      echo_error = accepted.error().describe();
      return;
    }
    echo.channel = accepted->get();
    echo.arm();
    while (!stop.load(std::memory_order_acquire)) {
      if (auto ran = (*endpoint)->progress(100'000'000); !ran) {
        echo_error = ran.error().describe();
        break;
      }
    }
    accepted->reset();
  });
  auto finish = [&](std::string error) {
    stop.store(true, std::memory_order_release);
    echo_thread.join();
    if (out.error.empty()) out.error = std::move(error);
    if (out.error.empty()) out.error = echo_error;
    return std::move(out);
  };
  Result<std::string> address = listen_address.get();
  if (!address) return finish(address.error().describe());
  auto endpoint = transport::make_endpoint(backend, endpoint_options);
  if (!endpoint) return finish(endpoint.error().describe());
  auto client = (*endpoint)->connect(*address, transport::ChannelOptions{}, 10'000'000'000);
  if (!client) return finish(client.error().describe());
  describe = (*client)->describe() + " (inline progress)";
  transport::Channel& channel = **client;
  transport::Endpoint& client_endpoint = **endpoint;
  timed_round_trips(o, out, [&]() -> std::string {
    std::optional<Result<std::vector<std::byte>>> reply;
    channel.recv_async([&reply](Result<std::vector<std::byte>> r) { reply = std::move(r); });
    channel.send_async(std::span<const std::byte>(message), [](Result<void>) {});
    const int64_t give_up_ns = monotonic_ns() + kReplyTimeoutNs;
    while (!reply) {
      const int64_t left_ns = give_up_ns - monotonic_ns();
      if (left_ns <= 0) return "no reply within 5 s";
      if (auto ran = client_endpoint.progress(left_ns); !ran) return ran.error().describe();
    }
    return *reply ? std::string() : reply->error().describe();
  });
  client->reset();
  endpoint->reset();
  return finish("");
}

Samples raw_udp_pingpong(const PingPongOptions& o) {
  Samples out;
  const int server = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int client = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  auto cleanup = [&] {
    if (server >= 0) ::close(server);
    if (client >= 0) ::close(client);
  };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (server < 0 || client < 0 ||
      ::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    out.error = fmt::format("raw UDP sockets on 127.0.0.1: {}", std::strerror(errno));
    cleanup();
    return out;
  }
  timeval tv{1, 0};
  ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    std::vector<std::byte> buf(65536);
    pollfd pfd{server, POLLIN, 0};
    while (!stop.load(std::memory_order_relaxed)) {
      if (::poll(&pfd, 1, 100) <= 0) continue;
      sockaddr_in from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n = ::recvfrom(server, buf.data(), buf.size(), 0,
                                   reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n > 0) {
        ::sendto(server, buf.data(), static_cast<size_t>(n), 0,
                 reinterpret_cast<sockaddr*>(&from), from_len);
      }
    }
  });
  std::vector<std::byte> message(o.size_bytes, std::byte{0x5a});
  std::vector<std::byte> reply(65536);
  out.rtt_ns.reserve(static_cast<size_t>(o.count));
  int64_t start_ns = 0;
  for (int i = 0; i < o.warmup + o.count; ++i) {
    if (i == o.warmup) start_ns = monotonic_ns();
    const int64_t t0 = monotonic_ns();
    if (::send(client, message.data(), message.size(), 0) < 0 ||
        ::recv(client, reply.data(), reply.size(), 0) < 0) {
      ++out.lost;  // a lost loopback datagram (or a 1 s timeout): counted, not fatal
      continue;
    }
    if (i >= o.warmup) out.rtt_ns.push_back(monotonic_ns() - t0);
  }
  out.wall_ns = monotonic_ns() - start_ns;
  stop = true;
  echo.join();
  cleanup();
  return out;
}

}  // namespace

int run_pingpong(const PingPongOptions& o) {
  if (o.size_bytes < 1 || o.size_bytes > 65000 || o.count < 1 || o.warmup < 0) {
    std::fprintf(stderr, "detwan-bench transport pingpong: --size must be in [1, 65000] and "
                         "--count >= 1\n");
    return 2;
  }
  const double cpu0 = process_cpu_s();
  std::string channel;
  Samples s = o.raw_udp                ? raw_udp_pingpong(o)
              : o.progress == "inline" ? inline_pingpong(o, channel)
                                       : detwan_pingpong(o, channel);
  const double cpu_s = process_cpu_s() - cpu0;
  const size_t done = s.rtt_ns.size();
  json::object doc{
      {"mode", o.raw_udp ? "raw_udp" : "detwan"},
      {"backend", o.raw_udp ? "udp-socket" : o.backend},
      {"channel", channel},
      {"progress", o.raw_udp ? "" : o.progress},
      {"size_bytes", o.size_bytes},
      {"count", done},
      {"lost", s.lost},
      {"rtt_ns", summarize_ns(s.rtt_ns)},
      {"wall_per_rt_ns", done ? static_cast<double>(s.wall_ns) / static_cast<double>(done) : 0.0},
      {"cpu_s", cpu_s},
      {"error", s.error.empty() ? json::value(nullptr) : json::value(s.error)}};
  if (o.json) {
    print_json(doc);
  } else {
    const auto& rtt = doc["rtt_ns"].as_object();
    std::printf("%s ping-pong, %llu bytes, %zu round trips: p50 %.2f us, p99 %.2f us%s%s\n",
                o.raw_udp ? "plain UDP" : "detwan", static_cast<unsigned long long>(o.size_bytes),
                done, static_cast<double>(rtt.at("p50").to_number<int64_t>()) / 1e3,
                static_cast<double>(rtt.at("p99").to_number<int64_t>()) / 1e3,
                s.error.empty() ? "" : ", error: ", s.error.c_str());
  }
  return s.error.empty() ? 0 : 1;
}

}  // namespace detwan::bench
