#include "tools/bench/coll_main.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/logging.h"
#include "tools/bench/coll_local.h"
#include "tools/bench/coll_options.h"
#include "tools/bench/coll_run.h"
#include "tools/bench/coll_sizes.h"

namespace detwan::bench {

bool is_collective_command(int argc, char** argv) {
  return argc >= 2 && parse_bench_collective(argv[1]).has_value();
}

int run_collective_command(int argc, char** argv) {
  auto parsed = parse_collective_args(argc, argv);
  if (!parsed) {
    std::fprintf(stderr, "detwan-bench %s: %s\n", argv[1], parsed.error().message.c_str());
    return 2;
  }
  if (parsed->help) {
    std::fputs(parsed->help_text.c_str(), stdout);
    return 0;
  }
  const CollBenchOptions& options = parsed->options;
  if (options.mode == LaunchMode::kLocal) return run_local(options, argc, argv);
  // The library logs its plan choices at info; a benchmark table wants warnings only unless
  // asked (DETWAN_LOG_LEVEL). Logs go to stderr, never into the report on stdout.
  common::LogOptions log;
  const char* level = std::getenv("DETWAN_LOG_LEVEL");
  log.level = level != nullptr && *level != '\0' ? level : "warn";
  if (auto ok = common::init_logging("detwan-bench", log); !ok) {
    std::fprintf(stderr, "detwan-bench: DETWAN_LOG_LEVEL: %s\n", ok.error().message.c_str());
    return 2;
  }
  return run_rank(options);
}

}  // namespace detwan::bench
