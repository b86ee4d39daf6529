// The readable summary: per path and direction a counts block, the loss-burst distribution and
// a percentile table in microseconds (iperf3's summary plus HdrHistogram's percentiles); with
// --compare a primary / compare / ratio block.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/perf/report.h"
#include "tools/perf/spec_json.h"

namespace detwan::perf {

namespace {

// "850 ns", "12.345 us", "1.500 ms", "10.000 s": the unit that keeps the number short.
std::string human_ns(int64_t ns) {
  double v = static_cast<double>(ns);
  double a = std::fabs(v);
  if (a < 1e3) return fmt::format("{} ns", ns);
  if (a < 1e6) return fmt::format("{:.3f} us", v / 1e3);
  if (a < 1e9) return fmt::format("{:.3f} ms", v / 1e6);
  return fmt::format("{:.3f} s", v / 1e9);
}

std::string human_bps(double bps) {
  if (bps >= 1e9) return fmt::format("{:.3f} Gbit/s", bps / 1e9);
  if (bps >= 1e6) return fmt::format("{:.3f} Mbit/s", bps / 1e6);
  if (bps >= 1e3) return fmt::format("{:.3f} kbit/s", bps / 1e3);
  return fmt::format("{:.0f} bit/s", bps);
}

double percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// Decimals for a row of microsecond values: 3 for small numbers (ns resolution), fewer as the
// magnitude grows so columns stay narrow.
int decimals_for(double max_abs_us) {
  if (max_abs_us < 100) return 3;
  if (max_abs_us < 10'000) return 2;
  return 1;
}

const char* direction_label(const char* direction) {
  return direction[0] == 'f' ? "client -> server" : "server -> client";
}

// Cells of one table, right-aligned under a shared width per column.
void print_grid(std::FILE* out, const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return;
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      if (c == 0) {
        line += fmt::format("{:<{}}", row[c], width[c]);
      } else {
        line += fmt::format("  {:>{}}", row[c], width[c]);
      }
    }
    fmt::print(out, "{}\n", line);
  }
}

void print_distributions(std::FILE* out, const DirectionResult& r) {
  struct Row {
    const char* name;
    const Distribution* d;
  };
  const std::array<Row, 5> rows{{{"owd", &r.owd_ns},
                                 {"pdv", &r.pdv_ns},
                                 {"ipdv", &r.ipdv_ns},
                                 {"rtt", &r.rtt_ns},
                                 {"sched err", &r.schedule_error_ns}}};
  std::vector<std::vector<std::string>> grid;
  grid.push_back(
      {"(us)", "count", "min", "p50", "p90", "p99", "p99.9", "p99.99", "p99.999", "max"});
  for (const Row& row : rows) {
    const Distribution& d = *row.d;
    if (d.count == 0) continue;
    const std::array<int64_t, 8> values{d.min,   d.p50,    d.p90,     d.p99,
                                        d.p99_9, d.p99_99, d.p99_999, d.max};
    double max_abs_us = 0;
    for (int64_t v : values) max_abs_us = std::max(max_abs_us, std::fabs(v / 1e3));
    int decimals = decimals_for(max_abs_us);
    std::vector<std::string> cells{row.name, fmt::format("{}", d.count)};
    for (int64_t v : values) cells.push_back(fmt::format("{:.{}f}", v / 1e3, decimals));
    grid.push_back(std::move(cells));
  }
  if (grid.size() > 1) print_grid(out, grid);
}

void print_direction(std::FILE* out, const std::string& target, const char* direction,
                     const DirectionResult& r) {
  fmt::print(out, "\n[{} {}] ({})\n", target, direction, direction_label(direction));
  fmt::print(out, "  duration {}   sent {}   received {}   lost {} ({:.3f}%)\n",
             human_ns(r.end_ns - r.start_ns), r.sent, r.received, r.lost, percent(r.lost, r.sent));
  std::string counts = fmt::format("  reordered {}   duplicates {}   malformed {}", r.reordered,
                                   r.duplicates, r.malformed);
  if (r.bound_ns > 0) {
    counts += fmt::format("   beyond bound {} ({:.3f}% of received, bound {})", r.beyond_bound,
                          percent(r.beyond_bound, r.received), human_ns(r.bound_ns));
  }
  fmt::print(out, "{}\n", counts);
  fmt::print(out, "  throughput {}   RFC 3550 jitter {:.3f} us\n", human_bps(r.throughput_bps),
             r.rfc3550_jitter_ns / 1e3);
  fmt::print(out, "  clock offset {}{} +- {} (receiver - sender, {})\n",
             r.clock_offset_ns < 0 ? "-" : "+", human_ns(std::llabs(r.clock_offset_ns)),
             human_ns(r.clock_error_ns), r.clock_corrected ? "corrected" : "not corrected");
  if (!r.loss_bursts.empty()) {
    std::string bursts;
    for (const auto& [length, count] : r.loss_bursts) {
      if (!bursts.empty()) bursts += ", ";
      bursts += fmt::format("{}x{}", length, count);
    }
    fmt::print(out, "  loss bursts (length x count): {}\n", bursts);
  }
  print_distributions(out, r);
}

void print_path(std::FILE* out, const PathReport& p) {
  if (p.forward) print_direction(out, p.target, "forward", *p.forward);
  if (p.reverse) print_direction(out, p.target, "reverse", *p.reverse);
  if (!p.forward && !p.reverse) fmt::print(out, "\n[{}] no results\n", p.target);
  if (!p.error.empty()) fmt::print(out, "  error: {}\n", p.error);
}

std::string ratio_cell(double primary, double compare) {
  if (primary == 0) return "-";
  return fmt::format("{:.2f}x", compare / primary);
}

void print_comparison(std::FILE* out, const char* direction, const DirectionResult& p,
                      const DirectionResult& c) {
  std::vector<std::vector<std::string>> grid;
  grid.push_back({direction, "primary", "compare", "ratio"});
  auto us_row = [&](const char* name, double pv, double cv) {
    int decimals = decimals_for(std::max(std::fabs(pv), std::fabs(cv)) / 1e3);
    grid.push_back({fmt::format("{} (us)", name), fmt::format("{:.{}f}", pv / 1e3, decimals),
                    fmt::format("{:.{}f}", cv / 1e3, decimals), ratio_cell(pv, cv)});
  };
  auto d = [](int64_t v) { return static_cast<double>(v); };
  us_row("owd p50", d(p.owd_ns.p50), d(c.owd_ns.p50));
  us_row("owd p99", d(p.owd_ns.p99), d(c.owd_ns.p99));
  us_row("owd p99.9", d(p.owd_ns.p99_9), d(c.owd_ns.p99_9));
  us_row("pdv p99", d(p.pdv_ns.p99), d(c.pdv_ns.p99));
  us_row("pdv p99.9", d(p.pdv_ns.p99_9), d(c.pdv_ns.p99_9));
  us_row("ipdv p99", d(p.ipdv_ns.p99), d(c.ipdv_ns.p99));
  us_row("jitter", p.rfc3550_jitter_ns, c.rfc3550_jitter_ns);
  double pl = percent(p.lost, p.sent);
  double cl = percent(c.lost, c.sent);
  grid.push_back(
      {"loss (%)", fmt::format("{:.3f}", pl), fmt::format("{:.3f}", cl), ratio_cell(pl, cl)});
  print_grid(out, grid);
}


}  // namespace

std::string interval_text(const std::string& target, const char* direction,
                          const DirectionResult& r, int64_t origin_ns) {
  std::string delay = "no delay samples";
  if (r.owd_ns.count > 0) {
    delay = fmt::format("owd p50 {} p99 {}", human_ns(r.owd_ns.p50), human_ns(r.owd_ns.p99));
    if (r.ipdv_ns.count > 0) delay += fmt::format("  ipdv p99 {}", human_ns(r.ipdv_ns.p99));
  }
  return fmt::format("[{:6.2f}-{:6.2f} s] {} {:<7}  sent {} received {} lost {} ({:.2f} %)  {}  "
                     "{}",
                     static_cast<double>(r.start_ns - origin_ns) / 1e9,
                     static_cast<double>(r.end_ns - origin_ns) / 1e9, target, direction, r.sent,
                     r.received, r.lost, percent(r.lost, r.sent), delay,
                     human_bps(r.throughput_bps));
}

void print_table(const TestReport& report, std::FILE* out) {
  const TestSpec& s = report.spec;
  std::string rate = s.mode == Mode::kThroughput && s.bitrate_bps == 0
                         ? std::string("max rate")
                         : fmt::format("{} pps", s.pps);
  std::string schedule = to_string(s.schedule);
  if (s.schedule == ScheduleKind::kBurst) schedule += fmt::format(" of {}", s.burst_packets);
  fmt::print(out, "detwan-perf {} test, {}: {} {} x {} B, {}, clock {}{}\n", to_string(s.mode),
             to_string(s.direction), schedule, rate, s.size_bytes, human_ns(s.duration_ns),
             to_string(report.clock),
             s.bound_ns > 0 ? ", bound " + human_ns(s.bound_ns) : std::string());
  for (const PathReport& p : report.paths) print_path(out, p);
  if (report.paths.size() >= 2) {
    const PathReport& p = report.paths[0];
    const PathReport& c = report.paths[1];
    if ((p.forward && c.forward) || (p.reverse && c.reverse)) {
      fmt::print(out, "\ncomparison: {} (compare) / {} (primary)\n", c.target, p.target);
      if (p.forward && c.forward) print_comparison(out, "forward", *p.forward, *c.forward);
      if (p.reverse && c.reverse) print_comparison(out, "reverse", *p.reverse, *c.reverse);
    }
  }
}

}  // namespace detwan::perf
