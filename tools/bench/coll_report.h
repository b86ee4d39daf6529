#pragma once
// Output of `detwan-bench <collective>`: the nccl-tests table (one out-of-place set, plus the
// algorithm and chunk the library chose) or one JSON object:
//   {"schema": "detwan-bench-collective", "version": 1, "collective", "nranks", "sites",
//    "ranks_per_site", "topology", "backend": {"intra", "inter"}, "path": null (lab mode adds
//    {"rate_bps", "rtt_ns", "loss"}), "rows": [{"size_bytes", "count", "type", "redop",
//    "root", "time_us", "algbw_GBps", "busbw_GBps", "wrong", "algorithm", "chunk_bytes"}],
//    "out_of_bounds", "avg_busbw_GBps", "error": null | "..."}
// "wrong" is null (and the table says N/A) when the run did not check (-c 0).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "tools/bench/coll_sizes.h"

namespace detwan::bench {

struct RunInfo {
  std::string collective;      // "allreduce"
  int nranks = 0;
  int sites = 0;
  int ranks_per_site = 0;      // 0 when the sites differ in size
  std::string topology;        // Topology::describe()
  std::string intra_backend;
  std::string inter_backend;
  int64_t wan_rate_bps = 0;
  std::string reservation;     // the agent reservation(s) ridden ("" = none)
  std::string algorithm;       // the requested one ("auto", ...)
  bool deterministic = false;
  SweepOptions sweep;
  int iters = 0;
  int warmup_iters = 0;
  int agg_iters = 1;     // -m: operations submitted together per iteration
  int inflight_ops = 1;  // the communicator's CommConfig::inflight_ops
  bool check = true;
};

struct Row {
  uint64_t size_bytes = 0;
  size_t count = 0;
  std::string type;
  std::string redop;           // "none" for collectives without one
  int root = -1;               // -1 for collectives without one
  double time_us = 0;
  // Each timed iteration's time (max over ranks) and its percentiles (nearest rank).
  std::vector<double> iter_time_us;
  double time_us_p50 = 0;
  double time_us_p99 = 0;
  double time_us_max = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  std::optional<uint64_t> wrong;
  std::string algorithm;
  int64_t chunk_bytes = 0;
};

// A row's numbers from its shape and the measured time.
[[nodiscard]] Row make_row(Collective collective, const Shape& shape, DataType type, ReduceOp op,
                           int root, int nranks, double time_us);

// The '#' header (run description and the column heads), one row line, the footer.
[[nodiscard]] std::string table_header(const RunInfo& info);
[[nodiscard]] std::string table_row(const Row& row);
[[nodiscard]] std::string table_footer(const std::vector<Row>& rows);
// nccl-tests' time column: %7.2f below 100 us, %7.1f below 10 ms, %7.0f above.
[[nodiscard]] std::string format_time_us(double time_us);

[[nodiscard]] uint64_t total_wrong(const std::vector<Row>& rows);
[[nodiscard]] double average_busbw(const std::vector<Row>& rows);

// One JSON document on stdout, newline-terminated.
void print_report_json(const boost::json::object& doc);

[[nodiscard]] boost::json::object report_json(const RunInfo& info, const std::vector<Row>& rows,
                                              const std::optional<std::string>& error);

}  // namespace detwan::bench
