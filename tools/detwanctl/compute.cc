#include "tools/detwanctl/compute.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "common/units.h"
#include "tools/detwanctl/format.h"

namespace detwan::tools::ctl {
namespace json = boost::json;
namespace {

[[noreturn]] void usage(const std::string& message) { throw std::invalid_argument(message); }

int64_t duration_of(const std::string& option, const std::string& text) {
  auto ns = common::parse_duration_ns(text);
  if (!ns) usage(fmt::format("{}: {}", option, ns.error().message));
  return *ns;
}

std::string seconds(const json::value& ns) {
  return fmt::format("{:.3f} s", ns.to_number<double>() / 1e9);
}

std::string format_pool(const json::object& p) {
  std::string out = fmt::format("{}  site {}  kind {}  ranks {}", std::string(p.at("name").as_string()),
                                std::string(p.at("site").as_string()),
                                std::string(p.at("kind").as_string()), p.at("ranks").to_number<int64_t>());
  const json::value& ref = p.at("reference");
  if (ref.is_object()) {
    out += fmt::format("  reference step {} ({} steps, {}, gradient {} B)",
                       seconds(ref.at("step_ns")), ref.at("steps").to_number<int64_t>(),
                       std::string(ref.at("model").as_string()),
                       ref.at("gradient_bytes").to_number<int64_t>());
  }
  for (const json::value& w : p.at("windows").as_array()) {
    out += fmt::format("\n    available {} .. {}", format_time(w.at("start_unix_ns").to_number<int64_t>()),
                       format_time(w.at("end_unix_ns").to_number<int64_t>()));
  }
  return out + "\n";
}

std::string format_plan(const json::object& plan) {
  const json::object& predicted = plan.at("predicted").as_object();
  std::string out = fmt::format(
      "predicted step {} (compute {}, allreduce {} of which {} not hidden by compute, {} in {} "
      "bucket(s)), efficiency {:.3f}\n",
      seconds(predicted.at("step_ns")), seconds(predicted.at("compute_ns")),
      seconds(predicted.at("allreduce_ns")), seconds(predicted.at("exposed_allreduce_ns")),
      std::string(predicted.at("algorithm").as_string()),
      predicted.at("buckets").to_number<int64_t>(), plan.at("predicted_efficiency").as_double());
  for (const json::value& s : plan.at("placement").as_array()) {
    out += fmt::format("  site {}: {} ranks (", std::string(s.at("site").as_string()),
                       s.at("ranks").to_number<int64_t>());
    bool first = true;
    for (const json::value& share : s.at("pools").as_array()) {
      out += fmt::format("{}{} x{} at {}", first ? "" : ", ", std::string(share.at("pool").as_string()),
                         share.at("ranks").to_number<int64_t>(), seconds(share.at("step_compute_ns")));
      if (plan.at("job").at("shares") == "speed") {
        out += fmt::format(" ({:.1f} % of the batch each)",
                           100 * share.at("batch_fraction").to_number<double>());
      }
      first = false;
    }
    out += ")\n";
  }
  for (const json::value& r : plan.at("reservations").as_array()) {
    std::string via;
    if (const json::value* path = r.as_object().if_contains("path")) {
      for (const json::value& node : path->as_array()) {
        via += (via.empty() ? "" : "-") + std::string(node.as_string());
      }
    }
    out += fmt::format("  reservation {} <-> {} at {}, latency bound {}{}\n",
                       std::string(r.at("from").as_string()), std::string(r.at("to").as_string()),
                       common::format_rate_bps(r.at("rate_bps").to_number<uint64_t>()),
                       seconds(r.at("max_latency_ns")), via.empty() ? "" : ", path " + via);
  }
  if (const json::value* held = plan.if_contains("reserved")) {
    for (const json::value& r : held->as_array()) {
      out += fmt::format("  held {} (commit it, or it expires)\n", std::string(r.at("id").as_string()));
    }
  }
  return out;
}

// Runs `command` (sh -c) and reads the reference step JSON it prints on its last line.
json::object measure(const std::string& command) {
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) usage("--measure: cannot run '" + command + "'");
  std::string output;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) usage(fmt::format("--measure: '{}' failed (status {})", command, status));
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  const size_t line = output.rfind('\n');
  boost::system::error_code ec;
  json::value v = json::parse(line == std::string::npos ? output : output.substr(line + 1), ec);
  if (ec || !v.is_object()) {
    usage("--measure: the command's last line is not a JSON object: " + output.substr(0, 200));
  }
  return v.as_object();
}

}  // namespace

void add_compute_commands(CLI::App& app, ComputeArgs& a) {
  a.pool = app.add_subcommand("pool", "compute pools the agent places jobs on");
  a.pool->require_subcommand(1);
  a.pool_register = a.pool->add_subcommand("register", "register (or replace) a pool");
  a.pool_register->add_option("--name", a.name, "pool name")->required();
  a.pool_register->add_option("--site", a.site, "its site")->required();
  a.pool_register->add_option("--kind", a.kind, "cpu, a100, ... (lower case)")->required();
  a.pool_register->add_option("--ranks", a.ranks, "ranks it hosts at once")->required();
  a.pool_register->add_option("--window", a.windows,
                              "available START..END (times as --start; default always)");
  a.pool_register->add_option("--measure", a.measure,
                              "command that measures a reference step and prints its JSON "
                              "(e.g. \"python3 tools/lab/measure_step.py --steps 5\")");
  a.pool_list = a.pool->add_subcommand("list", "list the pools");
  a.pool_show = a.pool->add_subcommand("show", "one pool");
  a.pool_show->add_option("name", a.name, "pool name")->required();
  a.pool_remove = a.pool->add_subcommand("remove", "remove a pool");
  a.pool_remove->add_option("name", a.name, "pool name")->required();
  for (CLI::App* sub : a.pool->get_subcommands({})) sub->fallthrough();

  a.plan = app.add_subcommand("plan", "where to run a job and the WAN it needs");
  a.plan->add_option("--gradient-bytes", a.gradient, "allreduced per step, e.g. 400m")->required();
  a.plan->add_option("--ranks", a.ranks, "data-parallel degree")->required();
  a.plan->add_option("--step-compute", a.step_compute, "compute per step per rank, e.g. 2s");
  a.plan->add_option("--step-compute-kind", a.step_compute_kind, "per pool kind, KIND=DURATION");
  a.plan->add_option("--target-step", a.target_step, "step time to meet, e.g. 2.5s");
  a.plan->add_option("--min-efficiency", a.min_efficiency, "compute / step time to meet");
  a.plan->add_option("--max-sites", a.max_sites,
                     "sites the job may span, 1..4 (3 or more only when fewer cannot host it)")
      ->check(CLI::Range(1, 4));
  a.plan->add_option("--bucket-bytes", a.bucket,
                     "the job allreduces its gradient in buckets of this size while the "
                     "backward pass runs (DDP: 25m); default: one allreduce after compute");
  a.plan->add_option("--first-bucket-bytes", a.first_bucket,
                     "the first bucket's size when it differs (DDP: 1m)");
  a.plan->add_option("--backward-fraction", a.backward_fraction,
                     "share of the step's compute in the backward pass (default: the pools' "
                     "measured share, else 2/3)")
      ->check(CLI::Range(0.0, 1.0));
  a.plan->add_option("--shares", a.shares,
                     "equal: every rank the same share of the batch (the slowest sets the pace); "
                     "speed: shares by speed (detwan.torch.hetero)")
      ->check(CLI::IsMember({"equal", "speed"}));
  a.plan->add_option("--site", a.sites, "only these sites");
  a.plan->add_option("--start", a.start, "window start (default now)");
  a.plan->add_option("--duration", a.duration, "window length (default 1h)");
  a.plan->add_option("--place", a.placement, "predict this placement only, SITE=RANKS (1 to 4 of them)");
  a.plan->add_flag("--reserve", a.reserve, "hold the reservations the plan needs");
  a.plan->add_option("--request-id", a.request_id, "client request id (with --reserve)");
}

std::optional<ComputeCall> compute_call(
    const ComputeArgs& a,
    const std::function<int64_t(const std::string&, const std::string&)>& time_of) {
  if (*a.pool_list) {
    return ComputeCall{"GET", "/v1/pools", "", [](const json::value& v) {
                         std::string out;
                         for (const json::value& p : v.at("pools").as_array())
                           out += format_pool(p.as_object());
                         return out.empty() ? std::string("no pools\n") : out;
                       }};
  }
  const auto print_pool = [](const json::value& v) { return format_pool(v.as_object()); };
  if (*a.pool_show) return ComputeCall{"GET", "/v1/pools/" + a.name, "", print_pool};
  if (*a.pool_remove) return ComputeCall{"DELETE", "/v1/pools/" + a.name, "", print_pool};
  if (*a.pool_register) {
    json::object body{{"name", a.name}, {"site", a.site}, {"kind", a.kind}, {"ranks", a.ranks}};
    json::array windows;
    for (const std::string& w : a.windows) {
      const size_t dots = w.find("..");
      if (dots == std::string::npos) usage("--window: '" + w + "' is not START..END");
      windows.push_back(json::object{{"start_unix_ns", time_of("--window", w.substr(0, dots))},
                                     {"end_unix_ns", time_of("--window", w.substr(dots + 2))}});
    }
    if (!windows.empty()) body["windows"] = std::move(windows);
    if (!a.measure.empty()) body["reference"] = measure(a.measure);
    return ComputeCall{"POST", "/v1/pools", json::serialize(body), print_pool};
  }
  if (*a.plan) {
    auto bytes = common::parse_size_bytes(a.gradient);
    if (!bytes) usage("--gradient-bytes: " + bytes.error().message);
    json::object body{{"gradient_bytes", *bytes}, {"ranks", a.ranks}};
    if (a.max_sites != 0) body["max_sites"] = a.max_sites;
    if (!a.step_compute.empty()) body["step_compute_ns"] = duration_of("--step-compute", a.step_compute);
    json::object by_kind;
    for (const std::string& kv : a.step_compute_kind) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) usage("--step-compute-kind: '" + kv + "' is not KIND=DURATION");
      by_kind[kv.substr(0, eq)] = duration_of("--step-compute-kind", kv.substr(eq + 1));
    }
    if (!by_kind.empty()) body["step_compute_ns_by_kind"] = std::move(by_kind);
    if (!a.target_step.empty()) body["target_step_ns"] = duration_of("--target-step", a.target_step);
    if (a.min_efficiency > 0) body["min_efficiency"] = a.min_efficiency;
    if (!a.bucket.empty()) {
      auto bucket = common::parse_size_bytes(a.bucket);
      if (!bucket) usage("--bucket-bytes: " + bucket.error().message);
      body["bucket_bytes"] = *bucket;
    }
    if (!a.first_bucket.empty()) {
      auto first = common::parse_size_bytes(a.first_bucket);
      if (!first) usage("--first-bucket-bytes: " + first.error().message);
      body["first_bucket_bytes"] = *first;
    }
    if (a.backward_fraction > 0) body["backward_fraction"] = a.backward_fraction;
    if (!a.shares.empty()) body["shares"] = a.shares;
    if (!a.sites.empty()) {
      json::array sites;
      for (const std::string& s : a.sites) sites.push_back(json::string(s));
      body["sites"] = std::move(sites);
    }
    if (!a.start.empty()) body["start_unix_ns"] = time_of("--start", a.start);
    if (!a.duration.empty()) body["duration_ns"] = duration_of("--duration", a.duration);
    if (!a.placement.empty()) {
      json::array fixed;
      for (const std::string& kv : a.placement) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) usage("--place: '" + kv + "' is not SITE=RANKS");
        char* end = nullptr;
        const unsigned long n = std::strtoul(kv.c_str() + eq + 1, &end, 10);
        if (end == kv.c_str() + eq + 1 || *end != '\0' || n == 0) {
          usage("--place: '" + kv + "' is not SITE=RANKS");
        }
        fixed.push_back(json::object{{"site", kv.substr(0, eq)}, {"ranks", n}});
      }
      body["placement"] = std::move(fixed);
    }
    if (a.reserve) body["reserve"] = true;
    if (!a.request_id.empty()) body["client_request_id"] = a.request_id;
    return ComputeCall{"POST", "/v1/plan", json::serialize(body),
                       [](const json::value& v) { return format_plan(v.as_object()); }};
  }
  return std::nullopt;
}

}  // namespace detwan::tools::ctl
