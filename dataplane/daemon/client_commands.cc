// detwan-gw's client subcommands: stats (table, --json, --prometheus, --watch), tunnels and
// apply, each one request on a gateway's control or admin socket (dataplane/gw/control_server.h).
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <variant>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "dataplane/daemon/commands.h"
#include "dataplane/daemon/stats_table.h"
#include "dataplane/daemon/tunnels_table.h"
#include "dataplane/gw/control_server.h"

namespace detwan::dataplane::daemon {
namespace {
constexpr int kStatsTimeoutMs = 5000;
constexpr int kApplyTimeoutMs = 10000;
}  // namespace

int command_stats(const std::string& control, bool json, bool prometheus) {
  const std::string request = prometheus ? R"({"cmd":"prometheus"})" : R"({"cmd":"stats"})";
  auto answer = gw::control_request(control, request, kStatsTimeoutMs);
  if (!answer) return fail(answer.error(), kExitFailure);
  if (prometheus) {
    std::printf("%s\n", answer->c_str());
    return kExitOk;
  }
  boost::json::error_code parse_error;
  const boost::json::value parsed = boost::json::parse(*answer, parse_error);
  if (parse_error || !parsed.is_object()) {
    std::fprintf(stderr, "detwan-gw: malformed answer from %s: %s\n",
                 gw::control_socket_name(control).c_str(), answer->c_str());
    return kExitFailure;
  }
  if (const auto* error = parsed.as_object().if_contains("error")) {
    std::fprintf(stderr, "detwan-gw: the gateway refused: %s\n",
                 error->is_string() ? error->as_string().c_str() : answer->c_str());
    return kExitFailure;
  }
  if (json) {
    std::printf("%s\n", answer->c_str());
  } else {
    std::fputs(format_stats_table(parsed).c_str(), stdout);
  }
  return kExitOk;
}

namespace {

// Asks the gateway; the parsed answer, or the exit status when there is none to show.
std::variant<boost::json::value, int> ask(const std::string& control, const std::string& request,
                                          int timeout_ms) {
  auto answer = gw::control_request(control, request, timeout_ms);
  if (!answer) return fail(answer.error(), kExitFailure);
  boost::json::error_code parse_error;
  boost::json::value parsed = boost::json::parse(*answer, parse_error);
  if (parse_error || !parsed.is_object()) {
    std::fprintf(stderr, "detwan-gw: malformed answer from %s: %s\n",
                 gw::control_socket_name(control).c_str(), answer->c_str());
    return kExitFailure;
  }
  return parsed;
}

std::string error_of(const boost::json::value& answer) {
  const auto* error = answer.as_object().if_contains("error");
  if (error == nullptr) return "";
  return error->is_string() ? std::string(error->as_string()) : boost::json::serialize(*error);
}

}  // namespace

// `stats --watch SECONDS`: what changed each interval (iperf3's habit), until SIGINT/SIGTERM or
// `count` intervals (0: no limit).
int command_watch(const std::string& control, double seconds, int count) {
  install_signal_handlers();
  auto first = ask(control, R"({"cmd":"stats"})", kStatsTimeoutMs);
  if (std::holds_alternative<int>(first)) return std::get<int>(first);
  boost::json::value before = std::move(std::get<boost::json::value>(first));
  if (auto error = error_of(before); !error.empty()) {
    std::fprintf(stderr, "detwan-gw: the gateway refused: %s\n", error.c_str());
    return kExitFailure;
  }
  const auto start = std::chrono::steady_clock::now();
  auto taken = start;
  for (int i = 0; count == 0 || i < count; ++i) {
    const auto due = taken + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < due) {
      if (stop_requested().load()) return kExitOk;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto next = ask(control, R"({"cmd":"stats"})", kStatsTimeoutMs);
    if (std::holds_alternative<int>(next)) return std::get<int>(next);
    boost::json::value now = std::move(std::get<boost::json::value>(next));
    const auto now_time = std::chrono::steady_clock::now();
    const double from_s = std::chrono::duration<double>(taken - start).count();
    const double to_s = std::chrono::duration<double>(now_time - start).count();
    std::fputs(format_stats_interval(before, now, to_s - from_s,
                                     fmt::format("[{:6.2f}-{:6.2f} s]", from_s, to_s))
                   .c_str(),
               stdout);
    std::fflush(stdout);
    before = std::move(now);
    taken = now_time;
  }
  return kExitOk;
}

int command_tunnels(const std::string& control, bool json) {
  auto answer = ask(control, R"({"cmd":"tunnels"})", kStatsTimeoutMs);
  if (const int* status = std::get_if<int>(&answer)) return *status;
  const auto& value = std::get<boost::json::value>(answer);
  if (const std::string error = error_of(value); !error.empty()) {
    std::fprintf(stderr, "detwan-gw: the gateway refused: %s\n", error.c_str());
    return kExitFailure;
  }
  if (json) {
    std::printf("%s\n", boost::json::serialize(value).c_str());
  } else {
    std::fputs(format_tunnels_table(value).c_str(), stdout);
  }
  return kExitOk;
}

namespace {

// JSON | @FILE | - : the request text.
std::optional<std::string> read_request(const std::string& argument) {
  if (argument == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  if (!argument.empty() && argument.front() == '@') {
    std::ifstream file(argument.substr(1), std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "detwan-gw: %s: cannot open: %s\n", argument.substr(1).c_str(),
                   std::strerror(errno));
      return std::nullopt;
    }
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
  }
  return argument;
}

}  // namespace

int command_apply(const std::string& control, const std::string& argument) {
  const auto text = read_request(argument);
  if (!text) return kExitBadInput;
  boost::json::error_code parse_error;
  boost::json::value request = boost::json::parse(*text, parse_error);
  if (parse_error || !request.is_object()) {
    std::fprintf(stderr, "detwan-gw: the request must be one JSON object (%s)\n",
                 parse_error ? parse_error.message().c_str() : "got something else");
    return kExitBadInput;
  }
  // The body of an apply without "cmd" is an apply.
  if (!request.as_object().contains("cmd")) request.as_object()["cmd"] = "apply";
  auto answer = ask(control, boost::json::serialize(request), kApplyTimeoutMs);
  if (const int* status = std::get_if<int>(&answer)) return *status;
  const auto& value = std::get<boost::json::value>(answer);
  std::printf("%s\n", boost::json::serialize(value).c_str());
  if (const std::string error = error_of(value); !error.empty()) {
    std::fprintf(stderr, "detwan-gw: the gateway refused: %s\n", error.c_str());
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace detwan::dataplane::daemon
