#pragma once
// A uring gateway of the backend tests, run on its own thread of the test process: opened first
// (sockets bound, so the other side can be told its endpoints), then started with its engine,
// its control socket and optionally an admin socket; stats read over the control socket.
#include <atomic>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"
#include "dataplane/uring/gateway.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::uring::testing {

inline int64_t tai_now_ns() {
  timespec now{};
  clock_gettime(CLOCK_TAI, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// A sharded gateway's epoch (shard 0 draws none: it is given one, as detwan-gw's run() does).
// Each site gets its own: two gateways of one epoch would each take the other's control
// packets for their own sent back (counted reflected) and never sync their clocks.
inline uint64_t next_shard_epoch() {
  static std::atomic<uint64_t> next{0x5eed'0001'0002'0003};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// One gateway: opened (sockets bound) first, so the other side can be told its endpoints, then
// started on its own thread.
class Site {
 public:
  // config.shards > 1: a sharded gateway (its engine shard 0 of N with its own epoch).
  explicit Site(gw::GatewayConfig config, Gateway::OpenOptions options = {})
      : config_(std::move(config)) {
    auto gateway = Gateway::open(config_, options);
    EXPECT_TRUE(gateway) << gateway.error().message;
    if (gateway) gateway_ = std::move(*gateway);
  }
  ~Site() { stop(); }

  [[nodiscard]] bool opened() const { return gateway_ != nullptr; }
  gw::GatewayConfig& config() { return config_; }
  [[nodiscard]] gw::Endpoint wan() const { return gateway_->wan_endpoint(0); }
  [[nodiscard]] std::optional<gw::Endpoint> service(size_t tunnel = 0) const {
    return gateway_->service_endpoint(tunnel);
  }
  [[nodiscard]] const std::string& control_name() const { return control_name_; }

  // Creates the engine from config() (with the endpoints actually bound) and runs the loop, with
  // an admin socket at admin_path if one is given.
  void start(const std::string& admin_path = "") {
    config_.wan_ports[0].local = wan();
    for (size_t i = 0; i < config_.tunnels.size(); ++i) {
      if (config_.tunnels[i].service_listen) config_.tunnels[i].service_listen = service(i);
    }
    const gw::ShardSpec shard{0, config_.shards, config_.shards > 1 ? next_shard_epoch() : 0};
    auto engine = gw::Engine::create(config_, tai_now_ns(), shard);
    ASSERT_TRUE(engine) << engine.error().message;
    engine_ = std::move(*engine);
    control_name_ = unique_socket_name(config_.name);
    auto control = gw::ControlServer::start(control_name_);
    ASSERT_TRUE(control) << control.error().message;
    control_ = std::move(*control);
    if (!admin_path.empty()) {
      gw::ControlServerOptions options;
      options.admin = true;
      options.max_request_bytes = gw::ControlServer::kMaxAdminRequestBytes;
      auto admin = gw::ControlServer::start(admin_path, options);
      ASSERT_TRUE(admin) << admin.error().message;
      admin_ = std::move(*admin);
    }
    context_.emplace(gw::RunContext{*engine_, config_, control_.get(), stop_, admin_.get()});
    thread_ = std::thread([this] { outcome_ = gateway_->run(*context_); });
  }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) {
      thread_.join();
      EXPECT_TRUE(outcome_) << outcome_.error().message;
    }
  }

  // A request's answer over the control socket, "" (and a failure) if none came.
  std::string request(std::string_view text) const {
    auto answer = gw::control_request(control_name_, text, 10'000);
    EXPECT_TRUE(answer) << answer.error().message;
    return answer ? *answer : std::string();
  }
  // The engine's stats, asked over the control socket like `detwan-gw stats --json` does.
  boost::json::value stats() const {
    const std::string answer = request(R"({"cmd":"stats"})");
    return answer.empty() ? boost::json::value() : boost::json::parse(answer);
  }
  Gateway& gateway() { return *gateway_; }
  // Shard k's own stats document (shard k >= 1 exists once started; read it after stop()).
  boost::json::value shard_stats(uint32_t k) const {
    const gw::Engine* engine = k == 0 ? engine_.get() : gateway_->shard_engine(k);
    EXPECT_NE(engine, nullptr);
    return engine != nullptr ? boost::json::parse(engine->stats_json(tai_now_ns()))
                             : boost::json::value();
  }

  // Asks for stats until `done(stats)` holds (a counter the loop updates when a completion is
  // reaped may lag what the application already received); the last stats either way.
  template <typename Predicate>
  boost::json::value stats_when(Predicate done) const {
    boost::json::value value = stats();
    for (int i = 0; i < 1000 && !done(value); ++i) value = stats();
    return value;
  }

 private:
  gw::GatewayConfig config_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<gw::Engine> engine_;
  std::unique_ptr<gw::ControlServer> control_;
  std::unique_ptr<gw::ControlServer> admin_;
  std::string control_name_;
  std::atomic<bool> stop_{false};
  std::optional<gw::RunContext> context_;
  std::thread thread_;
  common::Result<void> outcome_;
};

inline int64_t counter(const boost::json::value& stats,
                       std::initializer_list<std::string_view> path) {
  const boost::json::value* value = &stats;
  for (std::string_view key : path) {
    if (value->is_array()) {
      value = &value->as_array().at(std::stoul(std::string(key)));
    } else {
      value = &value->as_object().at(key);
    }
  }
  return value->to_number<int64_t>();
}

}  // namespace detwan::dataplane::uring::testing
