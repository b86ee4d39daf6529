#pragma once
// detwanctl's compute verbs (docs/control-api.md, "Compute pools" and "Plan"):
//   pool register --name N --site S --kind K --ranks R [--window START..END]...
//                 [--measure "CMD"]        CMD prints a reference step as JSON (tools/lab/
//                                          measure_step.py: the PyTorch model of docs/pytorch.md)
//   pool list | pool show NAME | pool remove NAME
//   plan --gradient-bytes SIZE --ranks R [--step-compute D | --step-compute-kind K=D ...]
//        [--target-step D] [--min-efficiency F] [--max-sites 1..4] [--site S]...
//        [--start TIME] [--duration D] [--place SITE=RANKS]... [--reserve [--request-id ID]]
//        [--bucket-bytes SIZE [--first-bucket-bytes SIZE] [--backward-fraction F]]
//                                          overlap of allreduce and backward pass
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

namespace detwan::tools::ctl {

struct ComputeArgs {
  CLI::App* pool = nullptr;
  CLI::App* pool_register = nullptr;
  CLI::App* pool_list = nullptr;
  CLI::App* pool_show = nullptr;
  CLI::App* pool_remove = nullptr;
  CLI::App* plan = nullptr;
  std::string name, site, kind, measure;
  uint32_t ranks = 0;
  std::vector<std::string> windows;
  std::string gradient, step_compute, target_step, start, duration, request_id, bucket,
      first_bucket;
  std::vector<std::string> step_compute_kind, sites, placement;
  double min_efficiency = 0;
  double backward_fraction = 0;
  std::string shares;  // "equal" / "speed"; empty: the agent's default (equal)
  uint32_t max_sites = 0;  // 0: the agent's default (every site count up to its limit)
  bool reserve = false;
};

// One HTTP call to make, and how to print its answer.
struct ComputeCall {
  std::string method;
  std::string path;
  std::string body;
  std::function<std::string(const boost::json::value&)> print;
};

void add_compute_commands(CLI::App& app, ComputeArgs& args);
// The call the parsed compute verb makes; nullopt if none was given. Throws std::invalid_argument
// naming the option on bad usage. `time_of` parses the --start forms of reserve.
std::optional<ComputeCall> compute_call(const ComputeArgs& args,
                                        const std::function<int64_t(const std::string&,
                                                                    const std::string&)>& time_of);

}  // namespace detwan::tools::ctl
