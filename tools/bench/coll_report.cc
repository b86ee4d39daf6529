#include "tools/bench/coll_report.h"

#include <cstdio>

#include <fmt/format.h>

#include "common/units.h"

namespace detwan::bench {

Row make_row(Collective collective, const Shape& shape, DataType type, ReduceOp op, int root,
             int nranks, double time_us) {
  Row row;
  row.size_bytes = shape.size_bytes;
  row.count = shape.count;
  row.type = std::string(collectives::to_string(type));
  row.redop = has_reduce_op(collective) ? std::string(collectives::to_string(op)) : "none";
  row.root = has_root(collective) ? root : -1;
  row.time_us = time_us;
  row.algbw_gbps = algbw_gbps(shape.size_bytes, time_us);
  row.busbw_gbps = row.algbw_gbps * bus_factor(collective, nranks);
  return row;
}

std::string format_time_us(double time_us) {
  if (time_us >= 10000.0) return fmt::format("{:7.0f}", time_us);
  if (time_us >= 100.0) return fmt::format("{:7.1f}", time_us);
  return fmt::format("{:7.2f}", time_us);
}

std::string table_header(const RunInfo& info) {
  std::string out;
  out += fmt::format("# detwan-bench {}: nranks {}, sites {}, ranks per site {}\n",
                     info.collective, info.nranks, info.sites,
                     info.ranks_per_site > 0 ? std::to_string(info.ranks_per_site) : "mixed");
  out += fmt::format("# topology: {}\n", info.topology);
  out += fmt::format("# backend: intra {}, inter {}; wan rate {}; algorithm {}{}\n",
                     info.intra_backend, info.inter_backend,
                     !info.reservation.empty()
                         ? "of reservation " + info.reservation
                         : info.wan_rate_bps > 0
                               ? common::format_rate_bps(static_cast<uint64_t>(info.wan_rate_bps))
                               : std::string("best effort"),
                     info.algorithm, info.deterministic ? ", deterministic" : "");
  const std::string step = info.sweep.step_bytes > 0
                               ? fmt::format("{}(bytes)", info.sweep.step_bytes)
                               : fmt::format("{}(factor)", info.sweep.step_factor);
  out += fmt::format("# minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} "
                     "agg iters: {} in flight: {} validation: {}\n",
                     info.sweep.min_bytes, info.sweep.max_bytes, step, info.warmup_iters,
                     info.iters, info.agg_iters, info.inflight_ops, info.check ? 1 : 0);
  out += "#\n";
  out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:^37}\n", "", "", "", "", "",
                     "out-of-place");
  out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>5}  "
                     "{:>9}\n",
                     "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                     "algo", "chunk");
  out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>5}  "
                     "{:>9}\n",
                     "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "", "(B)");
  return out;
}

std::string table_row(const Row& row) {
  const std::string wrong = row.wrong ? std::to_string(*row.wrong) : "N/A";
  return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {}  {:6.2f}  {:6.2f}  {:>6}  {:>5}  "
                     "{:>9}\n",
                     row.size_bytes, row.count, row.type, row.redop, row.root,
                     format_time_us(row.time_us), row.algbw_gbps, row.busbw_gbps, wrong,
                     row.algorithm, row.chunk_bytes);
}

uint64_t total_wrong(const std::vector<Row>& rows) {
  uint64_t total = 0;
  for (const auto& row : rows) total += row.wrong.value_or(0);
  return total;
}

double average_busbw(const std::vector<Row>& rows) {
  if (rows.empty()) return 0;
  double sum = 0;
  for (const auto& row : rows) sum += row.busbw_gbps;
  return sum / static_cast<double>(rows.size());
}

std::string table_footer(const std::vector<Row>& rows) {
  const uint64_t wrong = total_wrong(rows);
  return fmt::format("# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:g} \n#\n", wrong,
                     wrong == 0 ? "OK" : "FAILED", average_busbw(rows));
}

void print_report_json(const boost::json::object& doc) {
  const std::string text = boost::json::serialize(doc);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

boost::json::object report_json(const RunInfo& info, const std::vector<Row>& rows,
                                const std::optional<std::string>& error) {
  boost::json::array json_rows;
  for (const auto& row : rows) {
    boost::json::object r;
    r["size_bytes"] = row.size_bytes;
    r["count"] = row.count;
    r["type"] = row.type;
    r["redop"] = row.redop;
    r["root"] = row.root;
    r["time_us"] = row.time_us;
    r["time_us_p50"] = row.time_us_p50;
    r["time_us_p99"] = row.time_us_p99;
    r["time_us_max"] = row.time_us_max;
    boost::json::array iters;
    for (double us : row.iter_time_us) iters.push_back(us);
    r["iter_time_us"] = std::move(iters);
    r["algbw_GBps"] = row.algbw_gbps;
    r["busbw_GBps"] = row.busbw_gbps;
    if (row.wrong) {
      r["wrong"] = *row.wrong;
    } else {
      r["wrong"] = nullptr;
    }
    r["algorithm"] = row.algorithm;
    r["chunk_bytes"] = row.chunk_bytes;
    json_rows.push_back(std::move(r));
  }
  boost::json::object doc;
  doc["schema"] = "detwan-bench-collective";
  doc["version"] = 1;
  doc["collective"] = info.collective;
  doc["nranks"] = info.nranks;
  doc["sites"] = info.sites;
  doc["ranks_per_site"] = info.ranks_per_site;
  doc["topology"] = info.topology;
  doc["backend"] = {{"intra", info.intra_backend}, {"inter", info.inter_backend}};
  doc["wan_rate_bps"] = info.wan_rate_bps;
  doc["reservation"] = info.reservation;
  doc["requested_algorithm"] = info.algorithm;
  doc["deterministic"] = info.deterministic;
  doc["iters"] = info.iters;
  doc["warmup_iters"] = info.warmup_iters;
  doc["agg_iters"] = info.agg_iters;
  doc["inflight_ops"] = info.inflight_ops;
  doc["check"] = info.check;
  doc["path"] = nullptr;
  doc["rows"] = std::move(json_rows);
  doc["out_of_bounds"] = total_wrong(rows);
  doc["avg_busbw_GBps"] = average_busbw(rows);
  if (error) {
    doc["error"] = *error;
  } else {
    doc["error"] = nullptr;
  }
  return doc;
}

}  // namespace detwan::bench
