#include "dataplane/daemon/reloader.h"

#include <chrono>
#include <future>
#include <string>
#include <utility>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/logging.h"

namespace detwan::dataplane::daemon {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
// The loop answers within a few polls; a reload that waits longer is reported as lost.
constexpr auto kAnswerTimeout = std::chrono::seconds(30);

std::string ids_text(const boost::json::value& list) {
  std::string out;
  if (!list.is_array()) return out;
  for (const auto& id : list.as_array()) {
    out += (out.empty() ? "" : ",") + boost::json::serialize(id);
  }
  return out.empty() ? "-" : out;
}

}  // namespace

Reloader::Reloader(gw::ControlServer& control, common::ServiceNotifier& notifier,
                   std::string ready_status, std::string source)
    : control_(control),
      notifier_(notifier),
      ready_status_(std::move(ready_status)),
      source_(std::move(source)),
      thread_([this] { run(); }) {}

Reloader::~Reloader() {
  stop_.store(true);
  thread_.join();
}

void Reloader::run() {
  while (!stop_.load()) {
    std::this_thread::sleep_for(kPollInterval);
    if (reload_requested().exchange(false)) reload_once();
  }
}

void Reloader::reload_once() {
  auto log = common::logger("detwan-gw");
  log->info("SIGHUP: reloading {} (tunnel changes only)", source_);
  notifier_.reloading("reloading " + source_);
  auto answer = std::make_shared<std::promise<std::string>>();
  std::future<std::string> answered = answer->get_future();
  const bool queued = control_.submit(
      R"({"cmd":"reload"})", [answer](std::string text) { answer->set_value(std::move(text)); },
      true);
  std::string outcome;
  if (!queued) {
    outcome = "reload not queued: the control queue is full; send SIGHUP again";
    log->error("{}", outcome);
  } else {
    const auto deadline = std::chrono::steady_clock::now() + kAnswerTimeout;
    while (answered.wait_for(kPollInterval) != std::future_status::ready && !stop_.load() &&
           std::chrono::steady_clock::now() < deadline) {
    }
    if (answered.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      outcome = "reload: no answer from the loop";
      log->error("{}", outcome);
    } else {
      boost::system::error_code ec;
      const boost::json::value value = boost::json::parse(answered.get(), ec);
      const boost::json::object* object = ec ? nullptr : value.if_object();
      if (object == nullptr) {
        outcome = "reload: unreadable answer";
        log->error("{}", outcome);
      } else if (const auto* error = object->if_contains("error")) {
        outcome = fmt::format("reload refused: {}", error->is_string()
                                                          ? std::string(error->as_string())
                                                          : boost::json::serialize(*error));
        log->error("{}", outcome);
      } else {
        outcome = fmt::format("reloaded {}: generation {}, added {}, modified {}, removed {}",
                              source_, boost::json::serialize(object->at("generation")),
                              ids_text(object->at("added")), ids_text(object->at("modified")),
                              ids_text(object->at("removed")));
        log->info("{}", outcome);
      }
    }
  }
  notifier_.ready(fmt::format("{}; last reload: {}", ready_status_, outcome));
}

}  // namespace detwan::dataplane::daemon
