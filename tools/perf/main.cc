// detwan-perf: one-way delay, delay variation, loss and reordering, per direction, at tail
// percentiles; side by side over two paths; STAMP (RFC 8762) sender and reflector. docs/perf.md.
//
//   detwan-perf server [-p PORT] [-B ADDR] [-1] [--max-time S] [--max-rate RATE] [--json]
//   detwan-perf client HOST [-p PORT] [-t S] [--pps N | -b RATE] [--reverse | --bidir]
//                      [--throughput | --pingpong] [--compare HOST2] [--json] ...
//   detwan-perf stamp-reflect [-p PORT] [--stateful] [--rate-per-source RATE] [--honour-dscp]
//   detwan-perf stamp HOST [-p PORT] [-c COUNT] [--json]
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "common/units.h"
#include "common/version.h"
#include "tools/perf/options.h"
#include "tools/perf/perf_wire.h"
#include "tools/perf/session.h"
#include "tools/perf/stamp.h"

namespace {

using namespace detwan::perf;
namespace common = detwan::common;

// CLI11 validators over the common unit parsers, so "--bound 5ms" and "-b 100mbit" work and a
// bad value names itself.
int64_t duration_or_throw(const std::string& what, const std::string& text) {
  auto ns = common::parse_duration_ns(text);
  if (!ns) throw CLI::ValidationError(what, ns.error().message);
  return *ns;
}

int64_t seconds_to_ns(double s) { return static_cast<int64_t>(s * 1e9); }

const std::map<std::string, ScheduleKind> kSchedules{
    {"periodic", ScheduleKind::kPeriodic},
    {"poisson", ScheduleKind::kPoisson},
    {"burst", ScheduleKind::kBurst}};
const std::map<std::string, ClockMode> kClockModes{
    {"auto", ClockMode::kAuto}, {"sync", ClockMode::kSync}, {"estimate", ClockMode::kEstimate}};
const std::map<std::string, StampTimestamp> kTimestamps{{"ntp", StampTimestamp::kNtp},
                                                        {"ptp", StampTimestamp::kPtp}};

int run_cli(int argc, char** argv) {
  CLI::App app{"detwan-perf: latency, jitter and loss per direction; STAMP sender/reflector"};
  app.set_version_flag("--version", common::version_line("detwan-perf"));
  app.require_subcommand(1);

  // server
  ServerOptions server;
  double server_timeout_s = 3.0;
  auto* server_cmd = app.add_subcommand("server", "answer detwan-perf clients");
  server_cmd->add_option("-p,--port", server.port, "control port (TCP)")->capture_default_str();
  server_cmd->add_option("-B,--bind", server.bind, "local address (default: all)");
  server_cmd->add_flag("-1,--one-off", server.one_off, "serve one client, then exit");
  server_cmd->add_option("--peer-timeout", server_timeout_s,
                         "seconds of silence after which a client counts as vanished")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  server_cmd->add_flag("-v,--verbose", server.verbose, "log each session");
  server_cmd->add_flag("--json", server.json, "print counters as JSON on exit");
  double server_max_time_s = static_cast<double>(server.limits.max_duration_ns) / 1e9;
  std::string server_max_rate = std::to_string(server.limits.max_send_bps) + "bit";
  server_cmd->add_option("--max-time", server_max_time_s, "longest test a client may ask (s)")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  server_cmd
      ->add_option("--max-rate", server_max_rate,
                   "fastest stream the server sends (reverse/bidir), UDP payload bits/s (1gbit)")
      ->capture_default_str();
  server_cmd
      ->add_option("--max-pps", server.limits.max_send_pps,
                   "most packets/s of a stream the server sends")
      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}))
      ->capture_default_str();

  // client
  ClientOptions client;
  double duration_s = 10.0, interval_s = 1.0, client_timeout_s = 3.0;
  std::string bitrate, bound, schedule = "periodic", clock = "auto";
  bool reverse = false, bidir = false, throughput = false, pingpong = false;
  auto* client_cmd = app.add_subcommand("client", "run a test against a detwan-perf server");
  client_cmd->add_option("host", client.host, "server address")->required();
  client_cmd->add_option("-p,--port", client.port, "server control port")->capture_default_str();
  client_cmd->add_option("-B,--bind", client.bind, "local address of the test sockets");
  client_cmd->add_option("-t,--time", duration_s, "test duration in seconds")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  auto* pps_opt = client_cmd->add_option("--pps", client.spec.pps, "packets per second")
                      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}))
                      ->capture_default_str();
  client_cmd
      ->add_option("-b,--bitrate", bitrate,
                   "UDP payload rate (e.g. 100mbit); sets the packet rate; with --throughput, "
                   "0 or absent means as fast as possible")
      ->excludes(pps_opt);
  client_cmd->add_option("-l,--size", client.spec.size_bytes, "UDP payload bytes per packet")
      ->check(CLI::Range(static_cast<uint32_t>(kHeaderBytes), uint32_t{65507}))
      ->capture_default_str();
  client_cmd->add_option("--schedule", schedule, "send schedule")
      ->check(CLI::IsMember({"periodic", "poisson", "burst"}))
      ->capture_default_str();
  client_cmd->add_option("--burst", client.spec.burst_packets, "packets per burst (--schedule burst)")
      ->check(CLI::Range(uint32_t{1}, uint32_t{100000}))
      ->capture_default_str();
  client_cmd->add_option("--seed", client.spec.seed, "seed of the Poisson schedule")
      ->capture_default_str();
  auto* reverse_flag = client_cmd->add_flag("-R,--reverse", reverse, "server sends, client measures");
  client_cmd->add_flag("--bidir", bidir, "both directions at once")->excludes(reverse_flag);
  auto* throughput_flag =
      client_cmd->add_flag("--throughput", throughput, "send as fast as possible (or at -b)");
  client_cmd->add_flag("--pingpong", pingpong, "one packet in flight: RTT and one-way delays")
      ->excludes(throughput_flag);
  client_cmd->add_option("--bound", bound, "latency bound: count packets above it (e.g. 5ms)");
  client_cmd->add_option("-i,--interval", interval_s, "seconds per interval record (0: none)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  client_cmd->add_option("--dscp", client.spec.dscp, "DSCP of the test packets (0..63)")
      ->check(CLI::Range(0, 63));
  client_cmd->add_option("--clock", clock, "one-way delay clock correction (auto|sync|estimate)")
      ->check(CLI::IsMember({"auto", "sync", "estimate"}))
      ->capture_default_str();
  client_cmd->add_option("--compare", client.compare_host,
                         "second address of the same server: same schedule, both at once");
  client_cmd->add_option("--peer-timeout", client_timeout_s,
                         "seconds of silence after which the server counts as vanished (the TCP "
                         "connect waits at least 3.5 s: one lost SYN)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  client_cmd->add_flag("-J,--json", client.json, "print the result as JSON (docs/perf-json.md)");
  client_cmd->add_option("--json-file", client.json_path,
                         "also write the JSON document to this file (with the table on stdout)");
  client_cmd->add_flag("--json-stream", client.json_stream,
                       "print one JSON line per interval and direction while running");
  client_cmd->add_option("--raw", client.raw_path, "write per-packet records to this CSV file");
  client_cmd->add_option("--plot", client.plot_path,
                         "write delay over time and delay CDF to FILE.svg or FILE.png");

  // stamp-reflect
  StampReflectOptions reflect;
  double reflect_duration_s = 0;
  std::string reflect_ts = "ntp";
  auto* reflect_cmd = app.add_subcommand("stamp-reflect", "STAMP session-reflector (RFC 8762)");
  reflect_cmd->add_option("-p,--port", reflect.port, "UDP port")->capture_default_str();
  reflect_cmd->add_option("-B,--bind", reflect.bind, "local address (default: all)");
  reflect_cmd->add_flag("--stateful", reflect.stateful,
                        "own sequence numbers per session (per-direction loss)");
  reflect_cmd->add_option("--timestamp", reflect_ts, "timestamp format (ntp|ptp)")
      ->check(CLI::IsMember({"ntp", "ptp"}))
      ->capture_default_str();
  reflect_cmd->add_option("--duration", reflect_duration_s, "stop after S seconds (0: never)")
      ->check(CLI::Range(0.0, 31'536'000.0));
  reflect_cmd->add_flag("--json", reflect.json, "print counters as JSON on exit");
  std::string reflect_rate = std::to_string(reflect.rate_per_source_bps) + "bit";
  reflect_cmd
      ->add_option("--rate-per-source", reflect_rate,
                   "replies to one source address at most this rate (e.g. 10mbit; payload and "
                   "IP/UDP headers)")
      ->capture_default_str();
  reflect_cmd
      ->add_option("--burst-per-source", reflect.burst_per_source_bytes,
                   "bytes of replies a source may get back to back")
      ->check(CLI::Range(uint64_t{1500}, uint64_t{1} << 30))
      ->capture_default_str();
  reflect_cmd->add_flag("--honour-dscp", reflect.honour_dscp,
                        "let a Class of Service TLV choose the reply's DSCP (off: the reply "
                        "keeps the reflector's own)");
  reflect_cmd->add_flag("--answer-short", reflect.answer_short,
                        "answer requests under 41 bytes with the 44-byte base packet (a reply "
                        "larger than its request)");

  // stamp
  StampSenderOptions stamp;
  double stamp_interval_s = 0.1, stamp_timeout_s = 2.0;
  std::string stamp_ts = "ntp", stamp_clock = "auto";
  auto* stamp_cmd = app.add_subcommand("stamp", "STAMP session-sender (RFC 8762)");
  stamp_cmd->add_option("host", stamp.host, "reflector address")->required();
  stamp_cmd->add_option("-p,--port", stamp.port, "reflector UDP port")->capture_default_str();
  stamp_cmd->add_option("-c,--count", stamp.count, "test packets to send")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}))
      ->capture_default_str();
  stamp_cmd->add_option("-i,--interval", stamp_interval_s, "seconds between test packets")
      ->check(CLI::Range(0.000001, 3600.0))
      ->capture_default_str();
  stamp_cmd->add_option("--timestamp", stamp_ts, "timestamp format (ntp|ptp)")
      ->check(CLI::IsMember({"ntp", "ptp"}))
      ->capture_default_str();
  stamp_cmd->add_option("--ssid", stamp.ssid, "RFC 8972 session id (1..65535)")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  stamp_cmd->add_option("--dscp", stamp.dscp, "DSCP of the test packets (0..63)")
      ->check(CLI::Range(0, 63));
  stamp_cmd->add_option("-l,--size", stamp.size_bytes, "UDP payload bytes (>= 44)")
      ->check(CLI::Range(44, 65507))
      ->capture_default_str();
  stamp_cmd->add_option("--timeout", stamp_timeout_s, "seconds to wait for the last reflections")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  stamp_cmd->add_option("--clock", stamp_clock, "one-way delay clock correction (auto|sync|estimate)")
      ->check(CLI::IsMember({"auto", "sync", "estimate"}))
      ->capture_default_str();
  stamp_cmd->add_flag("-J,--json", stamp.json, "print the result as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version exit 0; every other parse or validation error is bad input: 2.
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (server_cmd->parsed()) {
    server.peer_timeout_ns = seconds_to_ns(server_timeout_s);
    server.limits.max_duration_ns = seconds_to_ns(server_max_time_s);
    auto max_rate = common::parse_rate_bps(server_max_rate);
    if (!max_rate || *max_rate == 0) {
      throw CLI::ValidationError("--max-rate", max_rate ? std::string("must be above 0")
                                                        : max_rate.error().message);
    }
    server.limits.max_send_bps = *max_rate;
    return run_server(server);
  }
  if (client_cmd->parsed()) {
    TestSpec& spec = client.spec;
    spec.duration_ns = seconds_to_ns(duration_s);
    spec.interval_ns = seconds_to_ns(interval_s);
    spec.schedule = kSchedules.at(schedule);
    spec.direction = bidir ? Direction::kBidir : reverse ? Direction::kReverse : Direction::kForward;
    spec.mode = throughput ? Mode::kThroughput : pingpong ? Mode::kPingPong : Mode::kStream;
    if (!bitrate.empty()) {
      auto bps = common::parse_rate_bps(bitrate);
      if (!bps) throw CLI::ValidationError("--bitrate", bps.error().message);
      spec.bitrate_bps = *bps;
      if (*bps > 0) {
        spec.pps = std::max<uint64_t>(1, *bps / (uint64_t{spec.size_bytes} * 8));
      } else if (!throughput) {
        throw CLI::ValidationError("--bitrate", "0 (as fast as possible) needs --throughput");
      }
    }
    if (!bound.empty()) spec.bound_ns = duration_or_throw("--bound", bound);
    spec.want_packets = !client.raw_path.empty() || !client.plot_path.empty();
    client.clock = kClockModes.at(clock);
    client.peer_timeout_ns = seconds_to_ns(client_timeout_s);
    if (!client.plot_path.empty() && !client.plot_path.ends_with(".svg") &&
        !client.plot_path.ends_with(".png")) {
      throw CLI::ValidationError("--plot", "'" + client.plot_path + "': use a .svg or .png file");
    }
    return run_client(client);
  }
  if (reflect_cmd->parsed()) {
    reflect.timestamp = kTimestamps.at(reflect_ts);
    reflect.duration_ns = seconds_to_ns(reflect_duration_s);
    auto rate = common::parse_rate_bps(reflect_rate);
    if (!rate || *rate == 0) {
      throw CLI::ValidationError("--rate-per-source",
                                 rate ? std::string("must be above 0") : rate.error().message);
    }
    reflect.rate_per_source_bps = *rate;
    return run_stamp_reflect(reflect);
  }
  stamp.timestamp = kTimestamps.at(stamp_ts);
  stamp.interval_ns = seconds_to_ns(stamp_interval_s);
  stamp.timeout_ns = seconds_to_ns(stamp_timeout_s);
  stamp.clock = kClockModes.at(stamp_clock);
  return run_stamp_sender(stamp);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_cli(argc, argv);
  } catch (const CLI::Error& e) {
    std::fprintf(stderr, "detwan-perf: %s\n", e.what());
    return 2;
  } catch (const detwan::common::Failure& e) {
    std::fprintf(stderr, "detwan-perf: %s\n", e.error().describe().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwan-perf: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "detwan-perf: unknown error\n");
  }
  return 1;
}
