#pragma once
// detwan-agent-bench scale (startup.cc): many reservations, admission latency, memory, startup.
#include <cstdint>
#include <string>

#include "tools/bench/agent/synthetic.h"

namespace detwan::tools::agent_bench {

struct ScaleOptions {
  uint32_t reservations = 100'000;
  uint32_t queries = 1'000;
  uint32_t spread_days = 30;
  uint32_t plans = 100;  // timed co-scheduling plans after the admissions
  std::string etcd;       // etcd://HOST:PORT,... ("" = SQLite only)
  std::string store_key;  // with etcd
  // Keep the journal in this folder (domain "scale-<nodes>-<seed>"); when it already holds one,
  // skip the filling and the timed admissions: time the startup alone over the same state.
  std::string keep_dir;
};

int command_scale(const SyntheticOptions& options, const ScaleOptions& scale, bool as_json);

}  // namespace detwan::tools::agent_bench
