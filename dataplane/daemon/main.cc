// detwan-gw: the dataplane gateway at a site's WAN edge (docs/gateway.md).
//
//   detwan-gw --check-config FILE                 validate, print the effective configuration
//   detwan-gw run --config FILE [--control NAME] [--admin-socket PATH] [--log-level L]
//                 [--timing low-cpu|busy] [--cpu N]
//   detwan-gw --config FILE [...]                 the same as run
//   detwan-gw stats [--control NAME] [--json | --prometheus]
//   detwan-gw tunnels [--control NAME] [--json]   the tunnels in force, generation, boot id
//   detwan-gw apply [--control PATH] (JSON | @FILE | -)   a write on the admin socket
//   detwan-gw keygen --out PATH                   a new X25519 identity key (PEM, mode 0600);
//                                                 prints its public key (base64)
//
// Exit status (docs/errors.md): 0 success, 1 runtime failure, 2 bad configuration or command line.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <variant>

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "common/logging.h"
#include "common/service_notify.h"
#include "common/net_address.h"
#include "common/status.h"
#include "common/units.h"
#include "common/version.h"
#include "common/x25519.h"
#include "dataplane/daemon/backends.h"
#include "dataplane/daemon/commands.h"
#include "dataplane/daemon/metrics_server.h"
#include "dataplane/daemon/reloader.h"
#include "dataplane/daemon/stats_table.h"
#include "dataplane/daemon/tunnels_table.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/run_context.h"

namespace detwan::dataplane::daemon {

// Set by SIGINT/SIGTERM; the datapath loop checks it at least every 10 ms. A lock-free atomic
// store is async-signal-safe.
namespace {
std::atomic<bool> stop_flag{false};
std::atomic<bool> reload_flag{false};  // SIGHUP (reloader.h)
static_assert(std::atomic<bool>::is_always_lock_free);
extern "C" void on_stop_signal(int) { stop_flag.store(true); }
extern "C" void on_reload_signal(int) { reload_flag.store(true); }
}  // namespace

std::atomic<bool>& stop_requested() { return stop_flag; }
std::atomic<bool>& reload_requested() { return reload_flag; }

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  action.sa_handler = on_reload_signal;
  sigaction(SIGHUP, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

int fail(const common::Error& error, int code) {
  std::fprintf(stderr, "detwan-gw: %s\n", error.message.c_str());
  return code;
}

namespace {

int exit_code_for(const common::Error& error) {
  switch (error.code) {
    case common::ErrorCode::kConfig:
    case common::ErrorCode::kInvalidArgument:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int64_t tai_now_ns() {
  timespec now{};
  clock_gettime(CLOCK_TAI, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

struct RunSettings {
  std::string config_file;
  std::optional<std::string> control;
  std::optional<std::string> admin_socket;
  std::string log_level = "info";
  std::optional<std::string> timing;
  std::optional<int> cpu;
};

int command_check_config(const std::string& file) {
  auto config = gw::load_gateway_config(file);
  if (!config) return fail(config.error(), kExitBadInput);
  std::fputs(gw::describe(*config).c_str(), stdout);
  return kExitOk;
}

// A new identity key pair: the private key to `path` (created, never overwritten, mode 0600),
// the public key (base64 of 32 bytes) on stdout, for the agent's gateways[].public_key.
int command_keygen(const std::string& path) {
  auto pair = common::crypto::x25519_generate();
  if (!pair) return fail(pair.error(), kExitFailure);
  auto pem = common::crypto::x25519_private_pem(pair->private_key);
  if (!pem) return fail(pem.error(), kExitFailure);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(
        common::Error{
            common::ErrorCode::kIo,
            fmt::format("keygen: cannot create '{}': {}{}", path, std::strerror(errno),
                        errno == EEXIST ? " (an existing key is never overwritten)" : "")},
        kExitFailure);
  }
  const ssize_t written = ::write(fd, pem->data(), pem->size());
  const bool ok = written == static_cast<ssize_t>(pem->size()) && ::fsync(fd) == 0;
  ::close(fd);
  OPENSSL_cleanse(pem->data(), pem->size());
  if (!ok) {
    ::unlink(path.c_str());
    return fail(
        common::Error{common::ErrorCode::kIo, fmt::format("keygen: cannot write '{}'", path)},
        kExitFailure);
  }
  std::printf("%s\n", common::crypto::x25519_public_base64(pair->public_key).c_str());
  return kExitOk;
}

int command_run(const RunSettings& settings) {
  common::LogOptions log_options;
  log_options.level = settings.log_level;
  if (auto logging = common::init_logging("detwan-gw", log_options); !logging) {
    return fail(common::Error{logging.error().code, "--log-level: " + logging.error().message},
                kExitBadInput);
  }
  auto loaded = gw::load_gateway_config(settings.config_file);
  if (!loaded) return fail(loaded.error(), kExitBadInput);
  gw::GatewayConfig config = std::move(*loaded);
  if (settings.control) config.control_socket = *settings.control;
  if (settings.admin_socket) {
    if (auto ok = gw::check_admin_socket(*settings.admin_socket); !ok) {
      return fail(common::Error{ok.error().code, "--admin-socket: " + ok.error().message},
                  kExitBadInput);
    }
    config.admin_socket = *settings.admin_socket;
  }
  if (settings.timing) {
    config.timing = *settings.timing == "busy" ? gw::TimingMode::kBusy : gw::TimingMode::kLowCpu;
  }
  if (settings.cpu) config.cpu = *settings.cpu;

  auto log = common::logger("detwan-gw");
  log->info("effective configuration ({}):\n{}", config.source, gw::describe(config));
  install_signal_handlers();

  // dpdk.lcores / gateway.shards (uring): this engine is shard 0; the backend creates the others
  // with the same epoch.
  gw::ShardSpec shard;
  const bool dpdk_shards = config.backend == gw::Backend::kDpdk && config.dpdk.lcores.size() > 1;
  const bool uring_shards = config.backend == gw::Backend::kUring && config.shards > 1;
  if (dpdk_shards || uring_shards) {
    shard.count = dpdk_shards ? static_cast<uint32_t>(config.dpdk.lcores.size()) : config.shards;
    std::random_device random;
    while (shard.epoch == 0) {
      shard.epoch = (uint64_t{random()} << 32) | random();
    }
  }
  auto engine = gw::Engine::create(config, tai_now_ns(), shard);
  if (!engine) return fail(engine.error(), exit_code_for(engine.error()));
  gw::ControlServerOptions read_only;
  read_only.admin_socket_hint = config.admin_socket;
  auto control = gw::ControlServer::start(config.control_socket, read_only);
  if (!control) return fail(control.error(), exit_code_for(control.error()));
  log->info(
      "control socket {} (detwan-gw stats --control {}; budget: {} answer per poll, {} "
      "bytes per poll, {} requests/s per uid after {})",
      (*control)->name(), (*control)->name(), read_only.max_answers_per_poll,
      read_only.max_write_bytes_per_poll, read_only.client_requests_per_s, read_only.client_burst);
  std::unique_ptr<gw::ControlServer> admin;
  if (!config.admin_socket.empty()) {
    gw::ControlServerOptions options;
    options.admin = true;
    options.mode = config.admin_mode;
    options.allowed_uids = config.admin_uids;
    options.max_request_bytes = gw::ControlServer::kMaxAdminRequestBytes;
    auto started = gw::ControlServer::start(config.admin_socket, options);
    if (!started) return fail(started.error(), exit_code_for(started.error()));
    admin = std::move(*started);
    log->info("admin socket {} (mode 0{:o}; detwan-gw apply --control {} ...)", admin->name(),
              config.admin_mode, admin->name());
  } else {
    log->info("no admin socket (gateway.admin_socket): tunnels cannot change at run time");
  }

  std::unique_ptr<MetricsServer> metrics;  // destroyed before the control server it asks
  if (!config.metrics.listen.empty()) {
    auto started = MetricsServer::start(config.metrics, **control, [] {
      timespec now{};
      clock_gettime(CLOCK_MONOTONIC, &now);
      return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
    });
    if (!started) return fail(started.error(), exit_code_for(started.error()));
    metrics = std::move(*started);
    log->info("metrics: http://{}/metrics (clients: {}; {}at most one build per {})",
              common::format_host_port(metrics->local_endpoint()),
              config.metrics.allow.empty() ? "loopback" : fmt::format("{}", fmt::join(config.metrics.allow, ", ")),
              config.metrics.tokens_file.empty() ? "" : "bearer tokens, ",
              common::format_duration_ns(config.metrics.min_interval_ns));
  }

  // Under systemd (Type=notify): ready once the backend's loop polls its control socket,
  // its watchdog pinged from there (a hung loop stops the pings), stopping when asked to.
  common::ServiceNotifier notifier;
  bool ready = false;
  const std::string ready_status = fmt::format("gateway {}: control socket {}", config.name,
                                               (*control)->name());
  (*control)->set_heartbeat([&notifier, &ready, &ready_status](int64_t now_ns) {
    if (!ready) {
      ready = true;
      notifier.ready(ready_status);
    }
    notifier.heartbeat(now_ns);
  });
  // SIGHUP: the file's tunnel changes applied (reloader.h); SIGHUPs before this are kept.
  auto reloader = std::make_unique<Reloader>(**control, notifier, ready_status, config.source);
  gw::RunContext context{**engine, config, control->get(), stop_requested(), admin.get()};
  auto outcome = run_backend(context);
  notifier.stopping(outcome ? "stopped" : outcome.error().message);
  reloader.reset();
  metrics.reset();
  control->reset();
  admin.reset();
  if (!outcome) {
    log->error("{}", outcome.error().message);
    return fail(outcome.error(), exit_code_for(outcome.error()));
  }
  log->info("stopped; final counters: {}", (*engine)->stats_json(tai_now_ns()));
  return kExitOk;
}

int main_impl(int argc, char** argv) {
  CLI::App app{"detwan-gw: the detwan dataplane gateway (docs/gateway.md)"};
  app.set_version_flag("--version", common::version_line("detwan-gw"));
  app.require_subcommand(0, 1);

  std::string check_file;
  app.add_option("--check-config", check_file,
                 "validate FILE, print the effective configuration, exit 0 (2 if invalid)");
  RunSettings run_settings;
  // Run options live on the top level so that `detwan-gw --config FILE` alone runs; the
  // subcommands fall through to them.
  app.add_option("--config", run_settings.config_file, "gateway configuration (YAML)");
  app.add_option("--control", run_settings.control,
                 "control socket: a path or @name (default @detwan-gw, or the config's); "
                 "for apply, the admin socket's path");
  app.add_option("--admin-socket", run_settings.admin_socket,
                 "admin socket (a filesystem path), overriding gateway.admin_socket");
  app.add_option("--log-level", run_settings.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  app.add_option("--timing", run_settings.timing, "low-cpu (default) or busy")
      ->check(CLI::IsMember({"low-cpu", "busy"}));
  app.add_option("--cpu", run_settings.cpu, "pin the datapath thread to this CPU")
      ->check(CLI::NonNegativeNumber);

  CLI::App* run = app.add_subcommand(
      "run", "run the gateway until SIGINT/SIGTERM (SIGHUP: reload the file's tunnels)");
  run->fallthrough();
  bool json = false;
  bool prometheus = false;
  CLI::App* stats = app.add_subcommand("stats", "counters of a running gateway");
  stats->fallthrough();
  CLI::Option* json_flag = stats->add_flag("--json", json, "print the raw JSON");
  CLI::Option* prometheus_flag =
      stats->add_flag("--prometheus", prometheus, "print Prometheus text format")
          ->excludes(json_flag);
  double watch_s = 0;
  int watch_count = 0;
  stats->add_option("--watch", watch_s,
                    "print what changed every SECONDS (per tunnel and port) until Ctrl-C")
      ->check(CLI::Range(0.1, 3600.0))
      ->excludes(json_flag)
      ->excludes(prometheus_flag);
  stats->add_option("--count", watch_count, "with --watch: stop after N intervals (0: never)")
      ->check(CLI::Range(0, 1'000'000));
  bool tunnels_json = false;
  CLI::App* tunnels = app.add_subcommand("tunnels", "the tunnels of a running gateway");
  tunnels->fallthrough();
  tunnels->add_flag("--json", tunnels_json, "print the raw JSON");
  std::string apply_request;
  CLI::App* apply = app.add_subcommand(
      "apply", "change a running gateway's tunnels: JSON, @FILE or - (stdin), sent to --control");
  apply->fallthrough();
  apply
      ->add_option("request", apply_request,
                   "{\"add\":[...],\"modify\":[...],\"remove\":[...]} (or any write request "
                   "with its \"cmd\"), @FILE, or - for stdin")
      ->required();

  std::string keygen_out;
  CLI::App* keygen = app.add_subcommand(
      "keygen", "write a new X25519 identity key (PEM, mode 0600) and print its public key");
  keygen->add_option("--out", keygen_out, "the private key file to create")->required();

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
    return kExitBadInput;
  }

  auto usage_error = [&](const std::string& message) {
    std::fprintf(stderr, "detwan-gw: %s (see --help)\n", message.c_str());
    return kExitBadInput;
  };
  const bool run_options = app.count("--log-level") > 0 || run_settings.timing.has_value() ||
                           run_settings.cpu.has_value() || run_settings.admin_socket.has_value();
  if (*keygen) {
    if (!check_file.empty() || !run_settings.config_file.empty() || run_options) {
      return usage_error("keygen takes only --out PATH");
    }
    return command_keygen(keygen_out);
  }
  if (!check_file.empty()) {
    if (*run || *stats || *tunnels || *apply || !run_settings.config_file.empty() || run_options) {
      return usage_error("--check-config takes no other command or option");
    }
    return command_check_config(check_file);
  }
  if (*stats) {
    if (!run_settings.config_file.empty() || run_options) {
      return usage_error("stats takes only --control, --json and --prometheus");
    }
    if (watch_s > 0) {
      return command_watch(run_settings.control.value_or(""), watch_s, watch_count);
    }
    return command_stats(run_settings.control.value_or(""), json, prometheus);
  }
  if (*tunnels || *apply) {
    if (!run_settings.config_file.empty() || run_options) {
      return usage_error(std::string(*tunnels ? "tunnels" : "apply") + " takes only --control" +
                         (*tunnels ? " and --json" : " and the request"));
    }
    if (*tunnels) return command_tunnels(run_settings.control.value_or(""), tunnels_json);
    return command_apply(run_settings.control.value_or(""), apply_request);
  }
  if (run_settings.config_file.empty()) {
    return usage_error(*run ? "run needs --config FILE"
                            : "nothing to do: give --check-config FILE, run --config FILE, stats, "
                              "tunnels or apply");
  }
  return command_run(run_settings);
}

}  // namespace
}  // namespace detwan::dataplane::daemon

int main(int argc, char** argv) {
  try {
    return detwan::dataplane::daemon::main_impl(argc, argv);
  } catch (const detwan::common::Failure& failure) {
    std::fprintf(stderr, "detwan-gw: %s\n", failure.error().message.c_str());
    return failure.error().code == detwan::common::ErrorCode::kConfig ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwan-gw: %s\n", e.what());
    return 1;
  }
}
