#include "dataplane/daemon/metrics_server.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/prometheus.h"
#include "common/version.h"
#include "control/api/http_server.h"

namespace detwan::dataplane::daemon {

namespace api = control::api;

constexpr std::string_view kExpositionType = "text/plain; version=0.0.4; charset=utf-8";

struct MetricsServer::State {
  gw::ControlServer* control = nullptr;
  std::function<int64_t()> clock_ns;
  int64_t min_interval_ns = 0;
  std::unique_ptr<api::HttpServer> http;  // set once started; read by the handler after that

  std::mutex mutex;
  bool stopped = false;
  bool building = false;
  bool have_cache = false;
  int64_t cache_at_ns = 0;
  std::string cache;  // the last exposition (engine part)
  std::vector<api::Respond> waiting;
  std::vector<std::string> parts;  // of the build under way (datapath thread only)
  std::atomic<uint64_t> builds{0}, cached_answers{0};

  std::string with_http_counters(const std::string& exposition) const {
    if (!http) return exposition;
    return exposition + api::http_counters_text(http->counters(), "detwan_gw_http");
  }

  static api::HttpResponse text_response(int status, std::string body) {
    api::HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    r.content_type = status == 200 ? std::string(kExpositionType) : "text/plain; charset=utf-8";
    return r;
  }

  // The request for the part after `after_tunnel` (-1: the first part, with the head).
  static std::string part_request(int64_t after_tunnel) {
    return fmt::format(
        R"({{"cmd":"prometheus","part":{{"head":{},"after_tunnel":{},"max_tunnels":{}}}}})",
        after_tunnel < 0 ? "true" : "false", after_tunnel, kTunnelsPerPart);
  }

  // Asks the loop for the part after `after_tunnel`; false if the control server's queue is
  // full.
  bool ask(const std::shared_ptr<State>& self, int64_t after_tunnel) {
    return control->submit(part_request(after_tunnel),
                           [self](std::string answer) { self->part_built(self, std::move(answer)); });
  }

  // On the datapath thread: one part of the exposition. Asks for the next part, or hands the
  // parts to a thread of their own to be joined and answered (never on the datapath thread).
  void part_built(const std::shared_ptr<State>& self, std::string answer) {
    if (answer.rfind("{\"error\"", 0) == 0) return finish(self, {}, answer);
    int64_t next = -1;
    if (const size_t at = answer.rfind(gw::kPrometheusMore); at != std::string::npos) {
      next = std::strtoll(answer.c_str() + at + gw::kPrometheusMore.size(), nullptr, 10);
      answer.resize(at);
    }
    parts.push_back(std::move(answer));
    if (next >= 0 && ask(self, next)) return;
    std::vector<std::string> all;
    all.swap(parts);
    if (next >= 0) return finish(self, {}, R"({"error":"busy: the control channel's local queue is full"})");
    std::thread([self, all = std::move(all)] { self->finish(self, all, ""); }).detach();
  }

  // The joined exposition (or the error) to every waiting scrape, and into the cache.
  void finish(const std::shared_ptr<State>&, const std::vector<std::string>& all,
              const std::string& error) {
    std::vector<api::Respond> respond;
    std::string body;
    const bool ok = error.empty();
    const std::string exposition = ok ? common::prometheus::merge(all) : std::string();
    {
      std::lock_guard lock(mutex);
      building = false;
      if (stopped) return;
      if (ok) {
        cache = exposition;
        have_cache = true;
        cache_at_ns = clock_ns();
      }
      body = ok ? with_http_counters(exposition)
                : fmt::format("detwan-gw could not build its metrics: {}\n", error);
      respond.swap(waiting);
    }
    for (api::Respond& r : respond) r(text_response(ok ? 200 : 503, body));
  }

  void scrape(const std::shared_ptr<State>& self, api::Respond respond) {
    std::unique_lock lock(mutex);
    if (stopped) {
      lock.unlock();
      return respond(text_response(503, "detwan-gw is stopping\n"));
    }
    if (have_cache && clock_ns() - cache_at_ns < min_interval_ns) {
      const std::string body = with_http_counters(cache);
      lock.unlock();
      ++cached_answers;
      return respond(text_response(200, body));
    }
    if (waiting.size() >= kMaxWaiting) {
      lock.unlock();
      return respond(text_response(
          503, fmt::format("busy: {} scrapes already wait for the gateway's loop\n", kMaxWaiting)));
    }
    waiting.push_back(std::move(respond));
    if (building) return;
    building = true;
    lock.unlock();
    ++builds;
    if (!ask(self, -1)) {
      finish(self, {}, R"({"error":"busy: the control channel's local queue is full"})");
    }
  }
};

common::Result<std::unique_ptr<MetricsServer>> MetricsServer::start(
    const gw::MetricsConfig& config, gw::ControlServer& control,
    std::function<int64_t()> clock_ns) {
  auto listen = common::parse_host_port(config.listen, /*allow_zero_port=*/true);
  if (!listen) {
    return common::make_error(listen.error().code,
                              fmt::format("metrics.listen: {}", listen.error().message));
  }
  api::HttpServerOptions options;
  options.listen = *listen;
  for (const std::string& text : config.allow) {
    auto prefix = common::parse_ip_prefix(text);
    if (!prefix) {
      return common::make_error(prefix.error().code,
                                fmt::format("metrics.allow: {}", prefix.error().message));
    }
    options.allow.push_back(*prefix);
  }
  if (options.allow.empty()) {  // loopback only
    options.allow = {*common::parse_ip_prefix("127.0.0.0/8"), *common::parse_ip_prefix("::1/128")};
  }
  options.tokens_file = config.tokens_file;
  options.threads = 1;
  options.server_name = "detwan-gw";
  options.max_connections = 16;
  options.max_body_bytes = 1024;  // a scrape has no body
  auto state = std::make_shared<State>();
  state->control = &control;
  state->clock_ns = std::move(clock_ns);
  state->min_interval_ns = config.min_interval_ns;
  std::weak_ptr<State> weak = state;
  auto http = api::HttpServer::start(options, [weak](api::HttpRequest request, api::Respond respond) {
    const std::shared_ptr<State> self = weak.lock();
    if (!self) return respond(State::text_response(503, "detwan-gw is stopping\n"));
    if (request.path != "/metrics") {
      return respond(State::text_response(
          404, fmt::format("no {} here: detwan-gw {} serves GET /metrics\n", request.path,
                           common::kVersion)));
    }
    if (request.method != "GET") {
      auto r = State::text_response(405, fmt::format("{} /metrics: only GET\n", request.method));
      r.headers.emplace_back("Allow", "GET");
      return respond(std::move(r));
    }
    self->scrape(self, std::move(respond));
  });
  if (!http) return std::unexpected(http.error());
  {
    std::lock_guard lock(state->mutex);
    state->http = std::move(*http);
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->state_ = std::move(state);
  return server;
}

MetricsServer::~MetricsServer() {
  if (!state_) return;
  std::vector<api::Respond> waiting;
  std::unique_ptr<api::HttpServer> http;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopped = true;
    waiting.swap(state_->waiting);
  }
  for (api::Respond& r : waiting) r(State::text_response(503, "detwan-gw is stopping\n"));
  // HttpServer::stop() drops answers not yet written: give these a moment to leave (the
  // gateway is stopping anyway; only when a scrape was waiting).
  if (!waiting.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  {
    std::lock_guard lock(state_->mutex);
    http = std::move(state_->http);
  }
  if (http) http->stop();
}

common::HostPort MetricsServer::local_endpoint() const {
  std::lock_guard lock(state_->mutex);
  return state_->http ? state_->http->local_endpoint() : common::HostPort{};
}

uint64_t MetricsServer::builds() const noexcept { return state_->builds.load(); }
uint64_t MetricsServer::cached_answers() const noexcept { return state_->cached_answers.load(); }

}  // namespace detwan::dataplane::daemon
