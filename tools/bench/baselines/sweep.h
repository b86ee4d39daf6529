#pragma once
// The allreduce sweep shared by the gloo and Open MPI baselines: nccl-tests' options
// (-b -e -f -n -w -c), float sum, out-of-place, and nccl-tests' output (a table, or --json with
// the same row fields as `detwan-bench allreduce --json`). Each baseline only supplies a
// Collective over its library; everything measured and printed is the same code, so the three
// columns of tools/bench/compare-allreduce differ only in the library underneath.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

namespace detwan::bench::baselines {

struct SweepOptions {
  int64_t min_bytes = 32 << 20;
  int64_t max_bytes = 32 << 20;
  int64_t step_factor = 2;  // nccl-tests -f: multiply the size by this until > max
  int iters = 20;
  int warmup_iters = 5;
  int check = 1;  // nccl-tests -c: check the result of the last iteration of each size
  bool json = false;
  int64_t timeout_s = 600;  // per collective call, passed to the library where it has one
};

// What a baseline wraps. Every call is collective (all ranks call it in the same order) and
// blocking; a library failure (peer gone, timeout) throws std::exception with a message, which
// run_sweep's caller turns into the process's error.
class Collective {
 public:
  virtual ~Collective() = default;
  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int nranks() const = 0;
  // out[i] = sum over ranks of in[i]; in and out do not overlap.
  virtual void allreduce_sum(const float* in, float* out, size_t count) = 0;
  [[nodiscard]] virtual double max_over_ranks(double value) = 0;
  [[nodiscard]] virtual int64_t sum_over_ranks(int64_t value) = 0;
};

// Adds -b -e -f -n -w -c --json --timeout to `app`, writing into `options`.
void add_sweep_options(CLI::App& app, SweepOptions& options);

// "64M" / "1G" / "8" (binary prefixes, as nccl-tests) -> bytes; -1 if malformed.
[[nodiscard]] int64_t parse_size_bytes(const std::string& text);

struct SweepRow {
  int64_t size_bytes = 0;
  int64_t count = 0;
  double time_us = 0;  // mean over the timed iterations, max over ranks
  // Each timed iteration's time (max over ranks) and its percentiles (nearest rank).
  std::vector<double> iter_time_us;
  double time_us_p50 = 0;
  double time_us_p99 = 0;
  double time_us_max = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  int64_t wrong = 0;  // elements that differ from the exact sum, over all ranks (-1: not checked)
};

// Element `index` of rank `rank`'s send buffer: small integers, so any sum over up to 2^16 ranks
// is exact in float and the check can demand bit equality whatever the reduction order.
[[nodiscard]] float sweep_pattern(int rank, int64_t index);

// Runs the sweep and returns its rows (on every rank). Throws what the Collective throws.
[[nodiscard]] std::vector<SweepRow> run_sweep(const SweepOptions& options, Collective& coll);

// Rank 0's output: the nccl-tests table, or one JSON object {"backend", "nranks", ..., "rows"}.
// `extra` is merged into the document (library version, transport, ...).
void print_report(const SweepOptions& options, const std::string& backend, int nranks,
                  const std::vector<SweepRow>& rows, const boost::json::object& extra);

// {"backend": ..., "error": message} with --json (stdout), and the message on stderr.
void print_error(const SweepOptions& options, const std::string& backend,
                 const std::string& message);

}  // namespace detwan::bench::baselines
