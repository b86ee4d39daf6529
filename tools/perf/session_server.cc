// detwan-perf server: the accept loop, one thread per session (server_session.cc), counters.
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <list>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "tools/perf/control.h"
#include "tools/perf/server_session.h"
#include "tools/perf/session.h"

namespace detwan::perf {
namespace {

constexpr size_t kMaxSessions = 64;

}  // namespace

struct Server::Impl {
  struct Slot {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  explicit Impl(ServerOptions o) : options(std::move(o)) {}

  void accept_loop();
  void serve(common::UniqueFd fd, Slot* slot);
  void reap(bool all);

  ServerOptions options;
  common::UniqueFd listen_fd;
  uint16_t port = 0;
  std::atomic<bool> stop{false};
  std::thread accept_thread;
  std::list<Slot> sessions;  // accept thread only
  uint32_t next_id = 0;

  mutable std::mutex mutex;  // guards `finished` for the condition variable
  std::condition_variable finished_cv;
  bool finished = false;

  std::atomic<uint64_t> served{0}, vanished{0}, rejected{0}, over_limits{0}, malformed_control{0},
      malformed_packets{0}, active{0};
  std::array<std::atomic<uint64_t>, kHelloRefusals> refused_hellos{};
  std::atomic<uint16_t> last_udp_port{0};
};

void Server::Impl::serve(common::UniqueFd fd, Slot* slot) {
  const uint32_t id = next_id++;
  SessionCounters counters{&malformed_packets, &last_udp_port, refused_hellos.data()};
  slot->thread = std::thread([this, slot, id, fd = std::move(fd), counters]() mutable {
    const SessionEnd end = run_server_session(std::move(fd), id, options, stop, counters);
    switch (end) {
      case SessionEnd::kServed:
        ++served;
        break;
      case SessionEnd::kRejected:
        ++rejected;
        break;
      case SessionEnd::kOverLimits:
        ++rejected;
        ++over_limits;
        break;
      case SessionEnd::kMalformedControl:
        ++malformed_control;
        break;
      case SessionEnd::kVanished:
        ++vanished;
        break;
      case SessionEnd::kStopped:
      case SessionEnd::kFailed:
        break;
    }
    --active;
    slot->done.store(true, std::memory_order_release);
  });
}

void Server::Impl::reap(bool all) {
  for (auto it = sessions.begin(); it != sessions.end();) {
    if (all || it->done.load(std::memory_order_acquire)) {
      if (it->thread.joinable()) it->thread.join();
      it = sessions.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::Impl::accept_loop() {
  bool accepted_any = false;
  while (!stop.load(std::memory_order_relaxed)) {
    reap(false);
    // One-off: one client's sessions (two with --compare, opened together) then exit.
    if (options.one_off && accepted_any && sessions.empty()) break;
    pollfd p{listen_fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    // Checked again: a connection that arrives after the one-off client finished is refused.
    reap(false);
    if (options.one_off && accepted_any && sessions.empty()) break;
    common::UniqueFd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) continue;
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
    if (sessions.size() >= kMaxSessions) {
      // Each session holds threads and buffers: refuse rather than let clients exhaust them.
      static constexpr char kBusy[] =
          "{\"type\":\"error\",\"message\":\"server busy: too many sessions\"}\n";
      (void)::send(fd.get(), kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      ++rejected;
      continue;
    }
    accepted_any = true;
    ++active;
    sessions.emplace_back();
    serve(std::move(fd), &sessions.back());
  }
  stop.store(true);
  reap(true);
  listen_fd.reset();
  std::lock_guard lock(mutex);
  finished = true;
  finished_cv.notify_all();
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { stop(); }

common::Result<void> Server::start() {
  auto fd = listen_tcp(impl_->options.bind, impl_->options.port);
  if (!fd) return std::unexpected(fd.error());
  auto local = local_address(fd->get());
  if (!local) return std::unexpected(local.error());
  impl_->port = ntohs(local->storage.ss_family == AF_INET
                          ? reinterpret_cast<const sockaddr_in*>(&local->storage)->sin_port
                          : reinterpret_cast<const sockaddr_in6*>(&local->storage)->sin6_port);
  impl_->listen_fd = std::move(*fd);
  // Session ids: random base so a stray packet of an earlier server run does not match.
  impl_->next_id = std::random_device{}() | 1u;
  impl_->accept_thread = std::thread([impl = impl_.get()] { impl->accept_loop(); });
  return {};
}

uint16_t Server::port() const noexcept { return impl_->port; }

void Server::stop() {
  if (!impl_) return;
  impl_->stop.store(true);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
}

void Server::wait(const std::atomic<bool>* stop_flag) {
  std::unique_lock lock(impl_->mutex);
  while (!impl_->finished && impl_->accept_thread.joinable()) {
    if (stop_flag != nullptr && stop_flag->load()) return;
    impl_->finished_cv.wait_for(lock, std::chrono::milliseconds(100));
  }
}

ServerCounters Server::counters() const {
  ServerCounters c;
  c.sessions_served = impl_->served.load();
  c.sessions_vanished = impl_->vanished.load();
  c.rejected_requests = impl_->rejected.load();
  c.over_limits = impl_->over_limits.load();
  c.malformed_control = impl_->malformed_control.load();
  c.malformed_packets = impl_->malformed_packets.load();
  c.active_sessions = impl_->active.load();
  c.last_udp_port = impl_->last_udp_port.load();
  const auto refused = [this](HelloRefusal why) {
    return impl_->refused_hellos[static_cast<size_t>(why)].load();
  };
  c.refused_hellos.session = refused(HelloRefusal::kSession);
  c.refused_hellos.token = refused(HelloRefusal::kToken);
  c.refused_hellos.source = refused(HelloRefusal::kSource);
  c.refused_hellos.late = refused(HelloRefusal::kLate);
  return c;
}

boost::json::object server_counters_json(const ServerCounters& c) {
  return {{"schema", "detwan-perf-server"},
          {"version", 1},
          {"sessions_served", c.sessions_served},
          {"sessions_vanished", c.sessions_vanished},
          {"rejected_requests", c.rejected_requests},
          {"over_limits", c.over_limits},
          {"malformed_control", c.malformed_control},
          {"malformed_packets", c.malformed_packets},
          {"refused_hellos",
           {{"total", c.refused_hellos.total()},
            {"session", c.refused_hellos.session},
            {"token", c.refused_hellos.token},
            {"source", c.refused_hellos.source},
            {"late", c.refused_hellos.late}}}};
}

namespace {

std::atomic<bool> g_server_stop{false};  // SIGINT/SIGTERM in run_server only

void on_server_signal(int /*signum*/) { g_server_stop.store(true); }

}  // namespace

int run_server(const ServerOptions& options) {
  Server server(options);
  if (auto started = server.start(); !started) {
    std::fprintf(stderr, "detwan-perf server: %s\n", started.error().message.c_str());
    return started.error().code == common::ErrorCode::kInvalidArgument ? 2 : 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_server_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Scripts wait for this line before they start a client.
  const ServerLimits& limits = options.limits;
  fmt::print(stderr,
             "detwan-perf server: listening on {} port {} (tests up to {:g} s; streams it sends "
             "up to {} bit/s and {} packets/s, paced)\n",
             options.bind.empty() ? "all addresses" : options.bind, server.port(),
             limits.max_duration_ns / 1e9, limits.max_send_bps, limits.max_send_pps);
  std::fflush(stderr);
  server.wait(&g_server_stop);
  server.stop();
  const ServerCounters c = server.counters();
  if (options.verbose) {
    fmt::print(stderr,
               "detwan-perf server: sessions served {}, vanished {}, rejected {} ({} over the "
               "limits), malformed control {}, malformed packets {}, refused UDP hellos {} "
               "(session {}, token {}, source {}, late {})\n",
               c.sessions_served, c.sessions_vanished, c.rejected_requests, c.over_limits,
               c.malformed_control, c.malformed_packets, c.refused_hellos.total(),
               c.refused_hellos.session, c.refused_hellos.token, c.refused_hellos.source,
               c.refused_hellos.late);
  }
  if (options.json) {
    std::printf("%s\n", boost::json::serialize(server_counters_json(c)).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace detwan::perf
