// detwan-wanem: a user-space WAN emulator between two interfaces. See docs/wanem.md.
//
//   detwan-wanem run --iface-a IF --iface-b IF [--spec SPEC] ...   forward and impair
//   detwan-wanem check-spec SPEC                                    validate and canonicalise
//   detwan-wanem stats|set|link --control PATH ...                  talk to a running instance
//
// Exit status: 0 success, 1 runtime failure, 2 bad settings or a refused request.
#include <atomic>
#include <cstdio>
#include <exception>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"
#include "tools/wanem/backend.h"
#include "tools/wanem/control.h"
#include "tools/wanem/engine/spec.h"
#include "tools/wanem/options.h"
#include "tools/wanem/post_queue.h"
#include "tools/wanem/stats_table.h"

namespace detwan::wanem {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadSettings = 2;

int exit_code_for(const common::Error& error) {
  switch (error.code) {
    case common::ErrorCode::kConfig:
    case common::ErrorCode::kInvalidArgument:
    case common::ErrorCode::kNotFound:
    case common::ErrorCode::kAlreadyExists:
      return kExitBadSettings;
    default:
      return kExitFailure;
  }
}

// SIGINT/SIGTERM are blocked in every thread (the EAL's included) and taken by one watcher
// thread with sigwait(), which sets the stop flag and wakes the poll loop. SIGUSR1 is how the
// program ends the watcher itself.
class SignalWatcher {
 public:
  SignalWatcher(std::atomic<bool>& stop, PostQueue& posts) : stop_(stop), posts_(posts) {
    thread_ = std::thread([this] { watch(); });
  }
  ~SignalWatcher() {
    if (!fired_.load()) pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  static sigset_t signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    return set;
  }

 private:
  void watch() {
    const sigset_t set = signals();
    int signal_number = 0;
    while (sigwait(&set, &signal_number) != 0) {
    }
    fired_.store(true);
    stop_.store(true);
    posts_.wake();
  }

  std::atomic<bool>& stop_;
  PostQueue& posts_;
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

// Call with SIGINT/SIGTERM/SIGUSR1 blocked in every thread (main_impl does, before any thread).
int command_run(const CommandLineSettings& cli) {
  auto log = common::logger("wanem");

  RunOptions options = resolve_run_options(cli);
  const BackendEntry* backend = find_backend(options.backend);
  if (backend == nullptr) {
    std::string names;
    for (const BackendEntry& entry : backends())
      names += std::string(names.empty() ? "" : ", ") + std::string(entry.name);
    throw common::Failure(
        common::Error{common::ErrorCode::kConfig,
                      "backend '" + options.backend + "': unknown (use " + names + ")"});
  }
  if (!backend->available()) {
    throw common::Failure(common::Error{common::ErrorCode::kConfig,
                                        "backend '" + options.backend +
                                            "' is not built into this binary (configure meson "
                                            "with -Ddpdk=enabled, libdpdk-dev installed)"});
  }
  log->info("detwan-wanem effective configuration:\n{}", describe(options));

  std::atomic<bool> stop{false};
  PostQueue posts;
  SignalWatcher watcher(stop, posts);
  std::unique_ptr<ControlServer> control;
  if (!options.control_path.empty()) {
    auto started = ControlServer::start(options.control_path, posts);
    if (!started) throw common::Failure(started.error());
    control = std::move(*started);
    log->info("control socket: {}", options.control_path);
  }
  auto outcome = backend->run(BackendRun{options, stop, posts, log});
  control.reset();
  if (!outcome) throw common::Failure(outcome.error());
  log->info("stopped; final counters: {}", outcome->final_stats_json);
  if (!options.stats_json_path.empty()) {
    std::ofstream file(options.stats_json_path);
    file << outcome->final_stats_json << '\n';
    if (!file) {
      log->error("cannot write --stats-json '{}'", options.stats_json_path);
      return kExitFailure;
    }
  }
  return kExitOk;
}

int command_check_spec(const std::string& text) {
  auto spec = parse_spec(text);
  if (spec) {
    if (auto valid = validate(*spec); !valid) {
      std::fprintf(stderr, "invalid spec: %s\n", valid.error().message.c_str());
      return kExitBadSettings;
    }
    std::printf("%s\n", format_spec(*spec).c_str());
    return kExitOk;
  }
  std::fprintf(stderr, "invalid spec: %s\n", spec.error().message.c_str());
  return kExitBadSettings;
}

// Sends a request, prints the answer; non-zero exit if the instance refused it.
int command_control(const std::string& path, const boost::json::object& request, bool json,
                    bool table) {
  auto response = control_request(path, boost::json::serialize(request));
  if (!response) {
    std::fprintf(stderr, "%s\n", response.error().message.c_str());
    return kExitFailure;
  }
  boost::json::error_code ec;
  const boost::json::value parsed = boost::json::parse(*response, ec);
  if (ec || !parsed.is_object()) {
    std::fprintf(stderr, "malformed answer from %s: %s\n", path.c_str(), response->c_str());
    return kExitFailure;
  }
  const boost::json::object& object = parsed.as_object();
  const boost::json::value* ok = object.if_contains("ok");
  if (ok == nullptr || !ok->is_bool() || !ok->as_bool()) {
    const boost::json::value* error = object.if_contains("error");
    std::fprintf(
        stderr, "refused: %s\n",
        error != nullptr && error->is_string() ? error->as_string().c_str() : response->c_str());
    return kExitBadSettings;
  }
  if (table) {
    const boost::json::value* stats = object.if_contains("stats");
    if (stats == nullptr) return kExitFailure;
    if (json) {
      std::printf("%s\n", boost::json::serialize(*stats).c_str());
    } else {
      std::printf("%s", format_stats_table(*stats).c_str());
    }
    return kExitOk;
  }
  std::printf("%s\n", response->c_str());
  return kExitOk;
}

int main_impl(int argc, char** argv) {
  CLI::App app{"detwan-wanem: user-space WAN emulator between two interfaces (docs/wanem.md)"};
  app.set_version_flag("--version", common::version_line("detwan-wanem"));
  app.require_subcommand(1);
  app.fallthrough();  // --log-level may also follow the subcommand
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();

  CommandLineSettings cli;
  CLI::App* run = app.add_subcommand("run", "forward frames between two interfaces, impaired");
  // Options bound to optionals: "not given" stays distinguishable from a default.
  run->add_option("--iface-a", cli.iface_a, "interface of side A (or DPDK port)");
  run->add_option("--iface-b", cli.iface_b, "interface of side B (or DPDK port)");
  run->add_option("--spec", cli.spec, "impairment SPEC for both directions");
  run->add_option("--spec-ab", cli.spec_ab, "impairment SPEC for A->B (overrides --spec)");
  run->add_option("--spec-ba", cli.spec_ba, "impairment SPEC for B->A (overrides --spec)");
  run->add_option("--seed", cli.seed, "random seed: ab uses N, ba N+1 (a seed= token wins)");
  run->add_option("--backend", cli.backend, "packet (default) or dpdk");
  run->add_option("--eal", cli.eal, "DPDK EAL arguments (dpdk backend)");
  run->add_option("--control", cli.control, "Unix socket for stats/set/link");
  run->add_flag("--busy-poll", cli.busy_poll, "never sleep (lower latency, one full core)");
  run->add_option("--config", cli.config_file, "YAML file with the same settings")
      ->check(CLI::ExistingFile);
  run->add_option("--stats-json", cli.stats_json, "write final counters (JSON) here at exit");
  run->add_option("--duration", cli.duration_s, "stop after this many seconds");
  run->add_option("--pool-frames", cli.pool_frames, "frame buffers shared by both directions");
  run->add_option("--rx-ring-frames", cli.rx_ring_frames,
                  "packet backend: frames per interface in the receive ring read in place "
                  "(default 4096; 0 = recvmmsg with a copy per frame)");
  run->add_option("--rx-coalesce-us", cli.rx_coalesce_us,
                  "sleeping mode: arrivals wait unread up to this long while a release is due "
                  "that soon (capped by the specs' least delay; timed by their kernel stamps; "
                  "default 500; 0: wake for every frame)");
  run->add_option("--rt-priority", cli.rt_priority,
                  "SCHED_FIFO priority of the poll thread when sleeping (default 10; 0: off)");

  std::string spec_text;
  CLI::App* check = app.add_subcommand("check-spec", "validate a SPEC, print its canonical form");
  check->add_option("SPEC", spec_text, "impairment spec")->required();

  std::string control_path;
  bool stats_json = false;
  CLI::App* stats = app.add_subcommand("stats", "counters of a running instance");
  stats->add_option("--control", control_path, "control socket")->required();
  stats->add_flag("--json", stats_json, "print JSON instead of a table");

  std::string dir = "both";
  std::string tokens;
  CLI::App* set = app.add_subcommand("set", "change the impairment of a running instance");
  set->add_option("--control", control_path, "control socket")->required();
  set->add_option("--dir", dir, "ab, ba or both")
      ->check(CLI::IsMember({"ab", "ba", "both"}))
      ->capture_default_str();
  set->add_option("TOKENS", tokens, "SPEC tokens, e.g. loss=1%,delay=20ms")->required();

  std::string state;
  CLI::App* link = app.add_subcommand("link", "force a running instance's link up or down");
  link->add_option("--control", control_path, "control socket")->required();
  link->add_option("--dir", dir, "ab, ba or both")
      ->check(CLI::IsMember({"ab", "ba", "both"}))
      ->capture_default_str();
  link->add_option("STATE", state, "up or down")->required()->check(CLI::IsMember({"up", "down"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return kExitBadSettings;
  }

  if (*run) {
    // Before any thread exists, so that every thread inherits the mask (see SignalWatcher).
    const sigset_t set = SignalWatcher::signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);
  }
  common::LogOptions log_options;
  log_options.level = log_level;
  if (auto initialised = common::init_logging("detwan-wanem", log_options); !initialised) {
    std::fprintf(stderr, "--log-level: %s\n", initialised.error().message.c_str());
    return kExitBadSettings;
  }

  if (*run) return command_run(cli);
  if (*check) return command_check_spec(spec_text);
  if (*stats) {
    return command_control(control_path, boost::json::object{{"cmd", "stats"}}, stats_json, true);
  }
  if (*set) {
    return command_control(control_path,
                           boost::json::object{{"cmd", "set"}, {"dir", dir}, {"tokens", tokens}},
                           false, false);
  }
  if (*link) {
    return command_control(
        control_path, boost::json::object{{"cmd", "link"}, {"dir", dir}, {"up", state == "up"}},
        false, false);
  }
  return kExitBadSettings;
}

}  // namespace
}  // namespace detwan::wanem

int main(int argc, char** argv) {
  try {
    return detwan::wanem::main_impl(argc, argv);
  } catch (const detwan::common::Failure& failure) {
    std::fprintf(stderr, "detwan-wanem: %s\n", failure.error().message.c_str());
    return detwan::wanem::exit_code_for(failure.error());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwan-wanem: %s\n", e.what());
    return 1;
  }
}
