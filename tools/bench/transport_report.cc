#include "tools/bench/transport_report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <sys/resource.h>
#include <time.h>

namespace detwan::bench {

namespace json = boost::json;

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

json::object stats_to_json(const transport::ChannelStats& s) {
  return json::object{{"messages_sent", s.messages_sent},
                      {"messages_received", s.messages_received},
                      {"bytes_sent", s.bytes_sent},
                      {"bytes_received", s.bytes_received},
                      {"segments_sent", s.segments_sent},
                      {"segments_retransmitted", s.segments_retransmitted},
                      {"fec_parity_sent", s.fec_parity_sent},
                      {"fec_recovered", s.fec_recovered},
                      {"datagrams_received", s.datagrams_received},
                      {"dropped_corrupt", s.dropped_corrupt},
                      {"dropped_malformed", s.dropped_malformed},
                      {"dropped_duplicate", s.dropped_duplicate},
                      {"dropped_foreign", s.dropped_foreign},
                      {"dropped_memory", s.dropped_memory},
                      {"dropped_auth", s.dropped_auth},
                      {"dropped_replay", s.dropped_replay},
                      {"timeouts", s.timeouts},
                      {"srtt_ns", s.srtt_ns},
                      {"rttvar_ns", s.rttvar_ns},
                      {"cwnd_bytes", s.cwnd_bytes},
                      {"loss_estimate", s.loss_estimate},
                      {"fec_parity_current", s.fec_parity_current},
                      {"recv_buffers_reused", s.recv_buffers_reused},
                      {"acks_piggybacked", s.acks_piggybacked}};
}

void add_counters(transport::ChannelStats& into, const transport::ChannelStats& from) {
  into.messages_sent += from.messages_sent;
  into.messages_received += from.messages_received;
  into.bytes_sent += from.bytes_sent;
  into.bytes_received += from.bytes_received;
  into.segments_sent += from.segments_sent;
  into.segments_retransmitted += from.segments_retransmitted;
  into.fec_parity_sent += from.fec_parity_sent;
  into.fec_recovered += from.fec_recovered;
  into.datagrams_received += from.datagrams_received;
  into.dropped_corrupt += from.dropped_corrupt;
  into.dropped_malformed += from.dropped_malformed;
  into.dropped_duplicate += from.dropped_duplicate;
  into.dropped_foreign += from.dropped_foreign;
  into.dropped_memory += from.dropped_memory;
  into.dropped_auth += from.dropped_auth;
  into.dropped_replay += from.dropped_replay;
  into.timeouts += from.timeouts;
  into.paths_failed += from.paths_failed;
  into.paths_recovered += from.paths_recovered;
  into.recv_buffers_reused += from.recv_buffers_reused;
  into.acks_piggybacked += from.acks_piggybacked;
}

json::object summarize_ns(std::vector<int64_t> v) {
  json::object o{{"count", v.size()}, {"min", 0}, {"mean", 0.0}, {"p50", 0},
                 {"p90", 0},          {"p99", 0}, {"max", 0}};
  if (v.empty()) return o;
  std::sort(v.begin(), v.end());
  auto rank = [&v](double q) {
    auto i = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
    return v[std::clamp<size_t>(i, 1, v.size()) - 1];
  };
  o["min"] = v.front();
  o["mean"] = static_cast<double>(std::accumulate(v.begin(), v.end(), int64_t{0})) /
              static_cast<double>(v.size());
  o["p50"] = rank(0.50);
  o["p90"] = rank(0.90);
  o["p99"] = rank(0.99);
  o["max"] = v.back();
  return o;
}

void print_json(const json::object& doc) {
  std::string text = json::serialize(doc);
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace detwan::bench
