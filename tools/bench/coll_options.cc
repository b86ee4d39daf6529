#include "tools/bench/coll_options.h"

#include <cstdlib>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/split.h"
#include "common/units.h"

namespace detwan::bench {
namespace {

using common::ErrorCode;
using common::make_error;
using common::Result;

constexpr int kMaxLocalSites = 26;

Result<uint64_t> size_option(const char* name, const std::string& text) {
  auto bytes = common::parse_size_bytes(text);
  if (!bytes) return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: {}", name,
                                                                         bytes.error().message));
  return *bytes;
}

Result<int> int_option(const char* name, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < INT32_MIN || value > INT32_MAX) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} '{}': expected an integer", name, text));
  }
  return static_cast<int>(value);
}

Result<std::vector<DataType>> types_option(const std::string& text) {
  if (text == "all") {
    std::vector<DataType> all;
    for (int t = 0; t < collectives::kNumDataTypes; ++t) all.push_back(static_cast<DataType>(t));
    return all;
  }
  auto type = collectives::parse_data_type(text);
  if (!type) return make_error(ErrorCode::kInvalidArgument,
                               "-d/--datatype: " + type.error().message + " or all");
  return std::vector<DataType>{*type};
}

Result<std::vector<ReduceOp>> ops_option(const std::string& text) {
  if (text == "all") {
    // nccl-tests' order: sum prod max min avg.
    std::vector<ReduceOp> all;
    for (int o = 0; o < collectives::kNumReduceOps; ++o) all.push_back(static_cast<ReduceOp>(o));
    return all;
  }
  auto op = collectives::parse_reduce_op(text);
  if (!op) return make_error(ErrorCode::kInvalidArgument,
                             "-o/--op: " + op.error().message + " or all");
  return std::vector<ReduceOp>{*op};
}

struct Texts {
  std::string min_bytes = "8", max_bytes = "64M", step_bytes, datatype = "float", op = "sum";
  std::string algo, chunk, wan_rate, rank, nranks, site_sizes;
  uint64_t step_factor = 2;
  double op_timeout_s = 0;
  int check = 1;
};

// "3,1": the ranks of sites a, b, ... (each >= 1, at most kMaxLocalSites sites, summing to
// --local).
Result<std::vector<int>> site_sizes_option(const std::string& text, int local_ranks) {
  std::vector<int> sizes;
  int total = 0;
  for (std::string_view piece : common::split(text, ',')) {
    const std::string item(piece);
    auto size = int_option("--site-sizes", item);
    if (!size || *size < 1) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--site-sizes {}: '{}' is not a rank count >= 1", text, item));
    }
    sizes.push_back(*size);
    total += *size;
  }
  if (sizes.size() > static_cast<size_t>(kMaxLocalSites) || total != local_ranks) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("--site-sizes {}: {} sites of {} ranks in all; need 1..{} sites "
                                  "summing to --local {}",
                                  text, sizes.size(), total, kMaxLocalSites, local_ranks));
  }
  return sizes;
}

// Fills in what the texts say and checks the combination; the options' defaults stay where a
// text is empty.
Result<void> resolve(const Texts& t, bool local_given, bool sites_given, const EnvLookup& env,
                     CollBenchOptions& o) {
  auto min_bytes = size_option("-b/--minbytes", t.min_bytes);
  if (!min_bytes) return std::unexpected(min_bytes.error());
  auto max_bytes = size_option("-e/--maxbytes", t.max_bytes);
  if (!max_bytes) return std::unexpected(max_bytes.error());
  o.sweep.min_bytes = *min_bytes;
  o.sweep.max_bytes = *max_bytes;
  o.sweep.step_factor = t.step_factor;
  if (!t.step_bytes.empty()) {
    auto step = size_option("-i/--stepbytes", t.step_bytes);
    if (!step) return std::unexpected(step.error());
    if (*step == 0) return make_error(ErrorCode::kInvalidArgument, "-i/--stepbytes: must be > 0");
    o.sweep.step_bytes = *step;
  }
  if (auto sizes = sweep_sizes(o.sweep); !sizes) return std::unexpected(sizes.error());
  auto types = types_option(t.datatype);
  if (!types) return std::unexpected(types.error());
  o.types = *types;
  auto ops = ops_option(t.op);
  if (!ops) return std::unexpected(ops.error());
  o.ops = *ops;
  if (!has_reduce_op(o.collective)) o.ops = {ReduceOp::kSum};  // printed as "none"
  if (o.iters < 1) return make_error(ErrorCode::kInvalidArgument,
                                     fmt::format("-n/--iters {}: must be >= 1", o.iters));
  if (o.warmup_iters < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("-w/--warmup_iters {}: must be >= 0", o.warmup_iters));
  }
  if (t.check != 0 && t.check != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("-c/--check {}: must be 0 or 1", t.check));
  }
  o.check = t.check == 1;
  if (!t.algo.empty()) {
    auto algo = collectives::parse_algorithm(t.algo);
    if (!algo) return make_error(ErrorCode::kInvalidArgument, "-a/--algo: " + algo.error().message);
    o.algorithm = *algo;
    o.algorithm_set = true;
  }
  if (!t.chunk.empty()) {
    auto chunk = size_option("--chunk", t.chunk);
    if (!chunk) return std::unexpected(chunk.error());
    o.chunk_bytes = static_cast<int64_t>(*chunk);
  }
  if (!t.wan_rate.empty()) {
    auto rate = common::parse_rate_bps(t.wan_rate);
    if (!rate) return make_error(ErrorCode::kInvalidArgument, "--wan-rate: " + rate.error().message);
    o.wan_rate_bps = static_cast<int64_t>(*rate);
  }
  if (t.op_timeout_s < 0) {
    return make_error(ErrorCode::kInvalidArgument, "--op-timeout: must be >= 0 seconds");
  }
  o.op_timeout_ns = static_cast<int64_t>(t.op_timeout_s * 1e9);

  // How the ranks meet: the command line wins over DETWAN_RANK / DETWAN_NRANKS / DETWAN_ID.
  const auto from_env = [&](const std::string& cli, const char* var) -> std::string {
    if (!cli.empty()) return cli;
    const char* value = env ? env(var) : std::getenv(var);
    return value != nullptr ? value : "";
  };
  const std::string rank_text = from_env(t.rank, "DETWAN_RANK");
  const std::string nranks_text = from_env(t.nranks, "DETWAN_NRANKS");
  const std::string id_text = from_env(o.id, "DETWAN_ID");
  const bool rank_mode = !t.rank.empty() || !t.nranks.empty() || !o.id.empty() ||
                         (!local_given && (!rank_text.empty() || !nranks_text.empty() ||
                                           !id_text.empty()));
  if (local_given && rank_mode) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--local launches every rank itself: drop --rank/--nranks/--id");
  }
  if (rank_mode) {
    if (rank_text.empty() || nranks_text.empty() || id_text.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("one rank of a job needs --rank, --nranks and --id (or "
                                    "DETWAN_RANK, DETWAN_NRANKS, DETWAN_ID); missing: {}{}{}",
                                    rank_text.empty() ? "rank " : "",
                                    nranks_text.empty() ? "nranks " : "",
                                    id_text.empty() ? "id" : ""));
    }
    auto rank = int_option("--rank/DETWAN_RANK", rank_text);
    if (!rank) return std::unexpected(rank.error());
    auto nranks = int_option("--nranks/DETWAN_NRANKS", nranks_text);
    if (!nranks) return std::unexpected(nranks.error());
    if (*nranks < 1 || *rank < 0 || *rank >= *nranks) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--rank {} of --nranks {}: need 0 <= rank < nranks >= 1",
                                    *rank, *nranks));
    }
    if (sites_given || !t.site_sizes.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{} goes with --local (one rank takes --site NAME)",
                                    sites_given ? "--sites" : "--site-sizes"));
    }
    o.mode = LaunchMode::kRank;
    o.rank = *rank;
    o.nranks = *nranks;
    o.id = id_text;
  } else {
    o.mode = LaunchMode::kLocal;
    if (o.local_ranks < 1) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--local {}: need at least 1 rank", o.local_ranks));
    }
    if (!t.site_sizes.empty()) {
      auto sizes = site_sizes_option(t.site_sizes, o.local_ranks);
      if (!sizes) return std::unexpected(sizes.error());
      if (sites_given && o.local_sites != static_cast<int>(sizes->size())) {
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("--sites {} but --site-sizes {} names {} sites",
                                      o.local_sites, t.site_sizes, sizes->size()));
      }
      o.local_site_sizes = std::move(*sizes);
      o.local_sites = static_cast<int>(o.local_site_sizes.size());
    } else if (o.local_sites < 1 || o.local_sites > kMaxLocalSites ||
               o.local_ranks % o.local_sites != 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--sites {}: must divide --local {} (and be 1..{})",
                                    o.local_sites, o.local_ranks, kMaxLocalSites));
    }
    if (!o.site.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--site names one rank's site: with --local use --sites K");
    }
    if (o.timeout_s <= 0) return make_error(ErrorCode::kInvalidArgument, "--timeout: must be > 0");
    o.nranks = o.local_ranks;
  }
  if (has_root(o.collective) && (o.root < 0 || o.root >= o.nranks)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("-r/--root {}: not a rank of {}", o.root, o.nranks));
  }
  return {};
}

}  // namespace

std::string local_site_name(int rank, int nranks, int nsites, const std::vector<int>& site_sizes) {
  if (!site_sizes.empty()) {
    int site = 0;
    for (int first = 0; site + 1 < static_cast<int>(site_sizes.size()); ++site) {
      first += site_sizes[static_cast<size_t>(site)];
      if (rank < first) break;
    }
    return std::string(1, static_cast<char>('a' + std::min(site, kMaxLocalSites - 1)));
  }
  const int per_site = std::max(nranks / std::max(nsites, 1), 1);
  return std::string(1, static_cast<char>('a' + std::min(rank / per_site, kMaxLocalSites - 1)));
}

Result<ParsedArgs> parse_collective_args(int argc, const char* const* argv, const EnvLookup& env) {
  if (argc < 2) return make_error(ErrorCode::kInvalidArgument, "missing the collective");
  ParsedArgs parsed;
  CollBenchOptions& o = parsed.options;
  auto collective = parse_bench_collective(argv[1]);
  if (!collective) return std::unexpected(collective.error());
  o.collective = *collective;
  o.collective_name = argv[1];

  CLI::App app{fmt::format("detwan-bench {}: nccl-tests-style sweep of the detwan {}", argv[1],
                           argv[1]),
               fmt::format("detwan-bench {}", argv[1])};
  app.footer("Ranks: --rank/--nranks/--id for one rank of a launched job, --local N to run N "
             "on this host (default 1), or --lab --sites K --ranks-per-site M (or --site-sizes "
             "3,1) [--rate R --rtt "
             "D --loss P] over the lab (see `detwan-bench " + std::string(argv[1]) +
             " --lab --help`).");
  Texts t;
  app.add_option("-b,--minbytes", t.min_bytes, "smallest size (bytes, 8k, 64M = 2^26)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", t.max_bytes, "largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", t.step_factor, "multiply the size by this")
      ->capture_default_str();
  app.add_option("-i,--stepbytes", t.step_bytes, "add this to the size instead of -f");
  app.add_option("-d,--datatype", t.datatype, "int8 uint8 int32 uint32 int64 uint64 half "
                 "bfloat16 float double, or all")->capture_default_str();
  app.add_option("-o,--op", t.op, "sum prod min max avg, or all")->capture_default_str();
  app.add_option("-r,--root", o.root, "root rank (broadcast, reduce)")->capture_default_str();
  app.add_option("-n,--iters", o.iters, "timed iterations per size")->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup_iters, "untimed iterations first")
      ->capture_default_str();
  app.add_option("-m,--agg_iters", o.agg_iters,
                 "operations submitted together per iteration, each on its own buffers (the "
                 "time is per operation)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--inflight", o.inflight_ops,
                 "operations the communicator runs at once (DETWAN_INFLIGHT_OPS; 1..8)")
      ->check(CLI::Range(1, 8));
  app.add_option("-c,--check", t.check, "1: check every result against the expected values")
      ->capture_default_str();
  app.add_option("-a,--algo", t.algo, "auto ring hd tree hier (default: DETWAN_ALGO or auto)");
  app.add_option("--chunk", t.chunk, "pipelining chunk bytes (default: the cost model's)");
  app.add_flag("--deterministic", o.deterministic, "fixed plan and reduction order");
  app.add_flag("--json", o.json, "print one JSON object (schema detwan-bench-collective)");
  app.add_option("--rank", t.rank, "this process's rank (default DETWAN_RANK)");
  app.add_option("--nranks", t.nranks, "ranks of the job (default DETWAN_NRANKS)");
  app.add_option("--id", o.id, "rendezvous: tcp://HOST:PORT (rank 0 hosts it) or file:///DIR, "
                 "secret in DETWAN_BOOTSTRAP_SECRET (default DETWAN_ID)");
  app.add_option("--site", o.site, "this rank's site (default DETWAN_SITE)");
  app.add_option("--wan-rate", t.wan_rate, "reserved rate per site pair and direction, e.g. "
                 "200mbit (default DETWAN_WAN_RATE)");
  app.add_option("--intra-backend", o.intra_backend, "transport inside a site (shm, tcp)");
  app.add_option("--inter-backend", o.inter_backend, "transport between sites (udp, tcp)");
  app.add_option("--listen-host", o.listen_host, "address peers reach this rank at");
  app.add_option("--op-timeout", t.op_timeout_s, "seconds per operation (default "
                 "DETWAN_TIMEOUT_MS or the library's)");
  auto* local = app.add_option("--local", o.local_ranks, "run N ranks on this host");
  auto* sites = app.add_option("--sites", o.local_sites, "with --local: K sites a, b, ... of "
                               "N/K ranks each (inter-site traffic over 127.0.0.1)");
  app.add_option("--site-sizes", t.site_sizes, "with --local: ranks of sites a, b, ... in "
                 "order, e.g. 3,1 (sites of different sizes; implies --sites)");
  app.add_option("--timeout", o.timeout_s, "with --local: seconds for the whole run")
      ->capture_default_str();
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::CallForHelp&) {
    parsed.help = true;
    parsed.help_text = app.help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    return make_error(ErrorCode::kInvalidArgument, e.what());
  }
  if (auto ok = resolve(t, local->count() > 0, sites->count() > 0, env, o); !ok) {
    return std::unexpected(ok.error());
  }
  return parsed;
}

}  // namespace detwan::bench
