#include "tools/bench/baselines/sweep.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "common/percentile.h"

namespace detwan::bench::baselines {
namespace {

boost::json::array iter_times(const std::vector<double>& us) {
  boost::json::array out;
  for (double v : us) out.push_back(v);
  return out;
}

constexpr int64_t kPatternModulus = 61;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

float sweep_pattern(int rank, int64_t index) {
  return static_cast<float>((index * 7 + static_cast<int64_t>(rank) * 13) % kPatternModulus);
}

int64_t parse_size_bytes(const std::string& text) {
  if (text.empty()) return -1;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return -1;
  }
  std::string unit = text.substr(used);
  int64_t scale = 1;
  if (unit == "K" || unit == "k")
    scale = int64_t{1} << 10;
  else if (unit == "M" || unit == "m")
    scale = int64_t{1} << 20;
  else if (unit == "G" || unit == "g")
    scale = int64_t{1} << 30;
  else if (!unit.empty() && unit != "B" && unit != "b")
    return -1;
  if (value < 0) return -1;
  return static_cast<int64_t>(value * static_cast<double>(scale));
}

void add_sweep_options(CLI::App& app, SweepOptions& options) {
  auto size_option = [&app](const char* flag, int64_t& target, const char* help) {
    app.add_option_function<std::string>(
           flag,
           [&target, flag](const std::string& text) {
             int64_t bytes = parse_size_bytes(text);
             if (bytes < 0) {
               throw CLI::ValidationError(flag,
                                          "'" + text + "': expected a size like 8, 64K, 1M, 1G");
             }
             target = bytes;
           },
           help)
        ->type_name("SIZE");
  };
  size_option("-b,--minbytes", options.min_bytes, "smallest size (default 32M)");
  size_option("-e,--maxbytes", options.max_bytes, "largest size (default 32M)");
  app.add_option("-f,--stepfactor", options.step_factor, "size multiplier (default 2)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("-n,--iters", options.iters, "timed iterations per size (default 20)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-w,--warmup_iters", options.warmup_iters, "untimed iterations (default 5)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("-c,--check", options.check, "check the results (default 1)")
      ->check(CLI::Range(0, 1));
  app.add_flag("--json", options.json, "one JSON object instead of the table (rank 0)");
  app.add_option("--timeout", options.timeout_s, "seconds any one collective may take")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
}

std::vector<SweepRow> run_sweep(const SweepOptions& options, Collective& coll) {
  const int nranks = coll.nranks();
  const int rank = coll.rank();
  const size_t max_count = static_cast<size_t>(options.max_bytes) / sizeof(float);
  std::vector<float> send(max_count);
  std::vector<float> recv(max_count);
  for (size_t i = 0; i < max_count; ++i) send[i] = sweep_pattern(rank, static_cast<int64_t>(i));

  std::vector<SweepRow> rows;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
       bytes = bytes == 0 ? 1 : bytes * options.step_factor) {
    SweepRow row;
    row.count = bytes / static_cast<int64_t>(sizeof(float));
    row.size_bytes = row.count * static_cast<int64_t>(sizeof(float));
    const auto count = static_cast<size_t>(row.count);
    for (int i = 0; i < options.warmup_iters; ++i)
      coll.allreduce_sum(send.data(), recv.data(), count);
    std::fill(recv.begin(), recv.begin() + static_cast<std::ptrdiff_t>(count), -1.0f);
    // Line the ranks up so one rank's late start is not counted as everyone's time.
    (void)coll.max_over_ranks(0.0);
    const double start_s = now_s();
    std::vector<double> local_iter_us(static_cast<size_t>(options.iters));
    for (int i = 0; i < options.iters; ++i) {
      const double iter_start_s = now_s();
      coll.allreduce_sum(send.data(), recv.data(), count);
      local_iter_us[static_cast<size_t>(i)] = (now_s() - iter_start_s) * 1e6;
    }
    const double local_us = (now_s() - start_s) * 1e6 / options.iters;
    row.time_us = coll.max_over_ranks(local_us);
    for (double us : local_iter_us) row.iter_time_us.push_back(coll.max_over_ranks(us));
    row.time_us_p50 = common::nearest_rank_percentile(row.iter_time_us, 0.50);
    row.time_us_p99 = common::nearest_rank_percentile(row.iter_time_us, 0.99);
    row.time_us_max = common::nearest_rank_percentile(row.iter_time_us, 1.0);
    const double factor = nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0;  // nccl-tests allreduce
    row.algbw_gbps =
        row.time_us > 0 ? static_cast<double>(row.size_bytes) / (row.time_us * 1e3) : 0;
    row.busbw_gbps = row.algbw_gbps * factor;
    if (options.check != 0) {
      int64_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        float expected = 0;
        for (int r = 0; r < nranks; ++r) expected += sweep_pattern(r, static_cast<int64_t>(i));
        if (recv[i] != expected) ++wrong;
      }
      row.wrong = coll.sum_over_ranks(wrong);
    } else {
      row.wrong = -1;
    }
    rows.push_back(row);
    if (bytes == 0 && options.max_bytes == 0) break;
  }
  return rows;
}

void print_report(const SweepOptions& options, const std::string& backend, int nranks,
                  const std::vector<SweepRow>& rows, const boost::json::object& extra) {
  if (options.json) {
    boost::json::object doc = extra;
    doc["backend"] = backend;
    doc["collective"] = "allreduce";
    doc["nranks"] = nranks;
    doc["type"] = "float";
    doc["redop"] = "sum";
    doc["iters"] = options.iters;
    doc["warmup_iters"] = options.warmup_iters;
    doc["busbw_factor"] = nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0;
    doc["time"] =
        "mean over iterations, max over ranks; time_us_p50/p99/max and iter_time_us: "
        "each timed iteration, max over ranks";
    boost::json::array out;
    for (const auto& r : rows) {
      out.push_back(boost::json::object{{"size_bytes", r.size_bytes},
                                        {"count", r.count},
                                        {"type", "float"},
                                        {"redop", "sum"},
                                        {"root", -1},
                                        {"time_us", r.time_us},
                                        {"time_us_p50", r.time_us_p50},
                                        {"time_us_p99", r.time_us_p99},
                                        {"time_us_max", r.time_us_max},
                                        {"iter_time_us", iter_times(r.iter_time_us)},
                                        {"algbw_GBps", r.algbw_gbps},
                                        {"busbw_GBps", r.busbw_gbps},
                                        {"wrong", r.wrong}});
    }
    doc["rows"] = std::move(out);
    doc["error"] = nullptr;
    std::cout << boost::json::serialize(doc) << std::endl;
    return;
  }
  fmt::print("# {} allreduce: nranks {}, iters {}, warmup {}, check {}\n", backend, nranks,
             options.iters, options.warmup_iters, options.check);
  fmt::print("#{:>11} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>7}\n", "size", "count", "type",
             "redop", "root", "time", "algbw", "busbw", "#wrong");
  fmt::print("#{:>11} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>7}\n", "(B)", "(elements)", "",
             "", "", "(us)", "(GB/s)", "(GB/s)", "");
  for (const auto& r : rows) {
    fmt::print("{:>12} {:>12} {:>8} {:>6} {:>6} {:>10.1f} {:>8.3f} {:>8.3f} {:>7}\n", r.size_bytes,
               r.count, "float", "sum", -1, r.time_us, r.algbw_gbps, r.busbw_gbps,
               r.wrong < 0 ? std::string("N/A") : std::to_string(r.wrong));
  }
  std::fflush(stdout);
}

void print_error(const SweepOptions& options, const std::string& backend,
                 const std::string& message) {
  std::cerr << backend << "_allreduce: " << message << std::endl;
  if (options.json) {
    std::cout << boost::json::serialize(
                     boost::json::object{{"backend", backend}, {"error", message}})
              << std::endl;
  }
}

}  // namespace detwan::bench::baselines
