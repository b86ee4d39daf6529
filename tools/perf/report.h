#pragma once
// What detwan-perf prints: the readable table, the --json document (docs/perf-json.md, schema
// version 1), --json-stream interval lines, the --raw per-packet CSV and the --plot figure.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/perf/metrics.h"
#include "tools/perf/options.h"

namespace detwan::perf {

inline constexpr int kJsonSchemaVersion = 1;

// Everything measured towards one destination (the server address, or the --compare address).
struct PathReport {
  std::string target;                         // "HOST:PORT" as given
  std::optional<DirectionResult> forward;     // client -> server (measured at the server)
  std::optional<DirectionResult> reverse;     // server -> client (measured at the client)
  std::vector<DirectionResult> forward_intervals, reverse_intervals;
  std::vector<PacketRecord> forward_packets, reverse_packets;  // when --raw / --plot asked
  std::string error;                          // why the results are partial ("" = complete)
};

struct TestReport {
  TestSpec spec;
  ClockMode clock = ClockMode::kAuto;
  int64_t start_realtime_ns = 0;  // CLOCK_REALTIME at the start of the test
  std::vector<PathReport> paths;  // paths[0]: the server; paths[1]: --compare, when given
};

// Readable table: one block per path and direction (counts, loss bursts, distributions as rows
// with p50 ... max columns, in microseconds); with two paths, a ratio column block
// (compare / primary) for the delay and variation figures.
void print_table(const TestReport& report, std::FILE* out);

// The --json document: {"schema": "detwan-perf", "version": 1, "start": ISO time, "test": {...},
// "target": ..., "forward": {...}, "reverse": {...} (when measured), "error": ... (when
// partial), "compare": {"target":..,"forward":..,"reverse":..,"error":..} and "ratios": {...}
// (with --compare)}. Indented, without a trailing newline.
std::string to_json(const TestReport& report);

// The last --json-stream line (no newline): {"type":"summary","result":<the to_json document>},
// compact, so a --json-stream consumer reads JSON lines only.
std::string summary_line(const TestReport& report);

// One --json-stream line (no newline): {"type":"interval","target":..,"direction":..,
// "interval": <direction object>}.
std::string interval_line(const std::string& target, const char* direction,
                          const DirectionResult& interval);

// The live text line of one interval (what a text-mode client prints as each interval ends,
// iperf3's habit), no newline: "[  1.00-  2.00 s] TARGET forward  sent 1000 received 999 lost 1
// (0.10 %)  owd p50 5.012 ms p99 5.201 ms  ipdv p99 12.000 us  4.000 Mbit/s". `origin_ns` is the
// test's start on the interval's clock (the first interval's start), from which the span counts.
std::string interval_text(const std::string& target, const char* direction,
                          const DirectionResult& interval, int64_t origin_ns);

// --raw: CSV with a header line: target,direction,seq,tx_ns,rx_ns,owd_ns (owd corrected as in
// the report). Lost packets are not rows.
common::Result<void> write_raw_csv(const TestReport& report, const std::string& path);

// --plot FILE.svg|FILE.png: three panels (one-way delay over time; delay CDF; the tail as
// 1 - CDF on a log axis down to 1e-5), one series per path and direction. Rendered by gnuplot
// (kUnavailable when it is missing; kInvalidArgument when no packet records were collected).
common::Result<void> write_plot(const TestReport& report, const std::string& path);

}  // namespace detwan::perf
