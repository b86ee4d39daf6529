#include "tools/wanem/options.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "common/config.h"
#include "common/status.h"
#include "common/split.h"
#include "common/units.h"

namespace detwan::wanem {
namespace {

[[noreturn]] void fail(std::string message) {
  throw common::Failure(common::Error{common::ErrorCode::kConfig, std::move(message)});
}

// True if SPEC text sets seed= itself (then --seed does not override it).
bool names_seed(std::string_view text) {
  for (std::string_view token : common::split(text, ',')) {
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    if (token.starts_with("seed=")) return true;
  }
  return false;
}

// One parsed spec together with where it came from, for error messages.
struct SpecSetting {
  ImpairmentSpec spec;
  bool names_seed = false;
  std::optional<common::ConfigNode> node;  // set when it came from the YAML file
  std::string option;                      // set when it came from the command line

  [[noreturn]] void fail_here(const std::string& message) const {
    if (node) node->fail(message);
    fail(option + ": " + message);
  }
};

SpecSetting parse_cli_spec(const std::string& option, const std::string& text) {
  auto parsed = parse_spec(text);
  if (!parsed) fail(option + ": " + parsed.error().message);
  return SpecSetting{std::move(*parsed), names_seed(text), std::nullopt, option};
}

SpecSetting parse_yaml_spec(const common::ConfigNode& node) {
  const std::string text = node.as_string();
  auto parsed = parse_spec(text);
  if (!parsed) node.fail(parsed.error().message);
  return SpecSetting{std::move(*parsed), names_seed(text), node, {}};
}

struct Sources {
  std::optional<SpecSetting> spec;
  std::optional<SpecSetting> spec_ab;
  std::optional<SpecSetting> spec_ba;
};

void load_yaml(const std::string& file, RunOptions& options, Sources& yaml) {
  const common::ConfigNode root = common::ConfigNode::load_file(file);
  if (!root.is_map()) root.fail("the file must hold a map of settings");
  root.check_keys({"iface_a", "iface_b", "backend", "eal", "spec", "spec_ab", "spec_ba", "seed",
                   "control", "busy_poll", "stats_json", "duration", "pool_frames",
                   "rx_ring_frames", "rt_priority", "rx_coalesce_us"});
  options.iface_a = root.get_string("iface_a", options.iface_a);
  options.iface_b = root.get_string("iface_b", options.iface_b);
  options.backend = root.get_string("backend", options.backend);
  options.eal = root.get_string("eal", options.eal);
  options.control_path = root.get_string("control", options.control_path);
  options.stats_json_path = root.get_string("stats_json", options.stats_json_path);
  options.busy_poll = root.get_bool("busy_poll", options.busy_poll);
  options.seed = static_cast<uint64_t>(root.get_int("seed", static_cast<int64_t>(options.seed), 0,
                                                    std::numeric_limits<int64_t>::max()));
  options.duration_ns = root.get_duration_ns("duration", options.duration_ns);
  options.pool_frames =
      static_cast<uint32_t>(root.get_int("pool_frames", options.pool_frames, 0, 1 << 22));
  options.rx_ring_frames =
      static_cast<uint32_t>(root.get_int("rx_ring_frames", options.rx_ring_frames, 0, 1 << 20));
  options.rt_priority = static_cast<int>(root.get_int("rt_priority", options.rt_priority, 0, 99));
  options.rx_coalesce_ns =
      root.get_int("rx_coalesce_us", options.rx_coalesce_ns / 1'000, 0, 10'000) * 1'000;
  if (auto node = root.maybe_child("spec")) yaml.spec = parse_yaml_spec(*node);
  if (auto node = root.maybe_child("spec_ab")) yaml.spec_ab = parse_yaml_spec(*node);
  if (auto node = root.maybe_child("spec_ba")) yaml.spec_ba = parse_yaml_spec(*node);
}

// Command line over file; per direction over shared.
const SpecSetting* pick(const Sources& cli, const Sources& yaml, bool ab) {
  const auto& cli_own = ab ? cli.spec_ab : cli.spec_ba;
  const auto& yaml_own = ab ? yaml.spec_ab : yaml.spec_ba;
  if (cli_own) return &*cli_own;
  if (cli.spec) return &*cli.spec;
  if (yaml_own) return &*yaml_own;
  if (yaml.spec) return &*yaml.spec;
  return nullptr;
}

ImpairmentSpec finish_spec(const SpecSetting* setting, uint64_t seed) {
  if (setting == nullptr) {
    ImpairmentSpec spec;
    spec.seed = seed;
    return spec;
  }
  ImpairmentSpec spec = setting->spec;
  if (!setting->names_seed) spec.seed = seed;
  if (auto valid = validate(spec); !valid) setting->fail_here(valid.error().message);
  return spec;
}

}  // namespace

RunOptions resolve_run_options(const CommandLineSettings& cli) {
  RunOptions options;
  Sources yaml;
  if (cli.config_file) load_yaml(*cli.config_file, options, yaml);

  if (cli.iface_a) options.iface_a = *cli.iface_a;
  if (cli.iface_b) options.iface_b = *cli.iface_b;
  if (cli.backend) options.backend = *cli.backend;
  if (cli.eal) options.eal = *cli.eal;
  if (cli.control) options.control_path = *cli.control;
  if (cli.stats_json) options.stats_json_path = *cli.stats_json;
  if (cli.seed) options.seed = *cli.seed;
  if (cli.busy_poll) options.busy_poll = true;
  if (cli.pool_frames) options.pool_frames = *cli.pool_frames;
  if (cli.rx_ring_frames) {
    if (*cli.rx_ring_frames > (1U << 20)) fail("--rx-ring-frames: at most 1048576 (0 = no ring)");
    options.rx_ring_frames = *cli.rx_ring_frames;
  }
  if (cli.rt_priority) {
    if (*cli.rt_priority < 0 || *cli.rt_priority > 99) fail("--rt-priority: must be in [0, 99]");
    options.rt_priority = *cli.rt_priority;
  }
  if (cli.rx_coalesce_us) {
    if (*cli.rx_coalesce_us < 0 || *cli.rx_coalesce_us > 10'000) {
      fail("--rx-coalesce-us: must be in [0, 10000]");
    }
    options.rx_coalesce_ns = *cli.rx_coalesce_us * 1'000;
  }
  if (cli.duration_s) {
    const double seconds = *cli.duration_s;
    if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) {
      fail(fmt::format("--duration: {} is not a duration in seconds >= 0", seconds));
    }
    options.duration_ns = static_cast<int64_t>(seconds * 1e9);
  }
  if (options.duration_ns < 0) fail("duration: must not be negative");

  Sources from_cli;
  if (cli.spec) from_cli.spec = parse_cli_spec("--spec", *cli.spec);
  if (cli.spec_ab) from_cli.spec_ab = parse_cli_spec("--spec-ab", *cli.spec_ab);
  if (cli.spec_ba) from_cli.spec_ba = parse_cli_spec("--spec-ba", *cli.spec_ba);
  options.spec_ab = finish_spec(pick(from_cli, yaml, true), options.seed);
  options.spec_ba = finish_spec(pick(from_cli, yaml, false), options.seed + 1);

  if (options.iface_a.empty()) fail("iface_a: no interface for side A (--iface-a)");
  if (options.iface_b.empty()) fail("iface_b: no interface for side B (--iface-b)");
  if (options.iface_a == options.iface_b) {
    fail("iface_a and iface_b are both '" + options.iface_a + "': they must differ");
  }
  return options;
}

std::string describe(const RunOptions& options) {
  std::string out;
  out += fmt::format("  backend: {}\n", options.backend);
  out += fmt::format("  iface_a: {}\n  iface_b: {}\n", options.iface_a, options.iface_b);
  out += fmt::format("  spec_ab: {}\n", format_spec(options.spec_ab));
  out += fmt::format("  spec_ba: {}\n", format_spec(options.spec_ba));
  out += fmt::format("  seed: {} (ab {}, ba {})\n", options.seed, options.spec_ab.seed,
                     options.spec_ba.seed);
  out += fmt::format("  busy_poll: {}\n", options.busy_poll);
  out += fmt::format("  rt_priority: {}\n",
                     options.rt_priority == 0
                         ? std::string("0 (SCHED_OTHER)")
                         : fmt::format("{} (SCHED_FIFO when sleeping)", options.rt_priority));
  out += fmt::format("  rx_coalesce_us: {}\n", options.rx_coalesce_ns / 1'000);
  out += fmt::format("  control: {}\n",
                     options.control_path.empty() ? "(none)" : options.control_path);
  out += fmt::format("  stats_json: {}\n",
                     options.stats_json_path.empty() ? "(none)" : options.stats_json_path);
  out += fmt::format("  duration: {}\n", options.duration_ns == 0
                                             ? std::string("until SIGINT/SIGTERM")
                                             : common::format_duration_ns(options.duration_ns));
  out += fmt::format("  pool_frames: {}\n", options.pool_frames == 0
                                                ? std::string("backend default")
                                                : std::to_string(options.pool_frames));
  if (options.backend == "packet") {
    out += fmt::format("  rx_ring_frames: {}\n", options.rx_ring_frames == 0
                                                     ? std::string("0 (recvmmsg, a copy per frame)")
                                                     : std::to_string(options.rx_ring_frames));
  }
  if (options.backend == "dpdk") out += fmt::format("  eal: {}\n", options.eal);
  return out;
}

}  // namespace detwan::wanem
