// detwan-bench: benchmarks of detwan components against their baselines.
//
//   detwan-bench transport send HOST:PORT --size 1g [--rate R] [--paths A,B --path-rates R1,R2]
//                [--local-paths L1,L2] [--fec] [--message-size 4m] [--inflight N]
//                [--backend udp] [--json]
//   detwan-bench transport recv --listen 0.0.0.0:PORT [--backend udp] [--json]
//   detwan-bench transport pingpong [--raw-udp] [--size 64] [--count N]
//                                   [--progress callback|wait|inline] [--json]
//   detwan-bench transport info [--mtu 1500] [--json]
//   detwan-bench transport --lab --rate 200mbit --rtt 40ms --loss 1% --size 1g [--json] ...
//       (runs tools/lab/transport.py: a lab path, a detwan transfer and iperf3 cubic/bbr on it;
//        `detwan-bench transport --lab --help` lists its options)
//   detwan-bench allreduce|broadcast|reduce|allgather|reducescatter|alltoall|sendrecv
//                -b 8 -e 64M -f 2 -d float -o sum -n 20 -w 5 -c 1 [--json] ...
//       (nccl-tests-style sweep of the collective library; one rank with --rank/--nranks/--id,
//        all ranks on this host with --local N [--sites K], or over the lab with --lab
//        --sites K --ranks-per-site M or --site-sizes 3,1 (tools/lab/collectives.py); see
//        coll_options.h)
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/split.h"
#include "common/units.h"
#include "common/version.h"
#include "tools/bench/coll_lab_exec.h"
#include "tools/bench/coll_main.h"
#include "tools/bench/lab_exec.h"
#include "tools/bench/transport_bench.h"
#include "tools/bench/transport_security.h"

namespace {

namespace bench = detwan::bench;
namespace common = detwan::common;

int64_t rate_or_throw(const std::string& what, const std::string& text) {
  auto bps = common::parse_rate_bps(text);
  if (!bps) throw CLI::ValidationError(what, bps.error().message);
  return static_cast<int64_t>(*bps);
}

uint64_t size_or_throw(const std::string& what, const std::string& text) {
  auto bytes = common::parse_size_bytes(text);
  if (!bytes) throw CLI::ValidationError(what, bytes.error().message);
  return *bytes;
}

void add_security_flags(CLI::App* cmd, bench::SecurityFlags& flags) {
  cmd->add_option("--key-file", flags.key_file,
                  "the job's key: 32 raw bytes or 64 hex digits, mode 600 (authenticated "
                  "channels; required unless --insecure)");
  cmd->add_flag("--encrypt", flags.encrypt, "encrypt payloads too (default: authenticate only)");
  cmd->add_flag("--insecure", flags.insecure, "unauthenticated channels (security mode none)");
}

// Both ends in this process (`in_process`): a random key unless --insecure.
detwan::transport::Security security_or_throw(const bench::SecurityFlags& flags,
                                              bool in_process = false) {
  auto security = in_process ? bench::in_process_security(flags) : bench::security_from(flags);
  if (!security) throw CLI::ValidationError("security", security.error().message);
  return *security;
}

bool wants_lab(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], "transport") != 0) return false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--lab") == 0) return true;
  }
  return false;
}

int run_cli(int argc, char** argv) {
  CLI::App app{"detwan-bench: detwan components against their baselines"};
  app.set_version_flag("--version", common::version_line("detwan-bench"));
  app.require_subcommand(1);
  auto* transport = app.add_subcommand("transport", "detwan transport transfers and ping-pong");
  transport->require_subcommand(1);
  transport->footer("transport --lab ...: a lab path, a detwan transfer and iperf3 cubic/bbr "
                    "over it (see `detwan-bench transport --lab --help`)");
  app.footer("Collectives (nccl-tests style; `detwan-bench allreduce --help`): allreduce "
             "broadcast reduce allgather reducescatter alltoall sendrecv");

  bench::SendOptions send;
  std::string size_text = "1g", message_text = "4m", rate_text, path_rates_text;
  std::vector<std::string> paths, locals;
  auto* send_cmd = transport->add_subcommand("send", "send --size bytes to a `recv`");
  send_cmd->add_option("remote", send.remotes, "HOST:PORT of the receiver")->required()
      ->expected(1);
  send_cmd->add_option("--size", size_text, "bytes to send (1g = 2^30)")->capture_default_str();
  send_cmd->add_option("--message-size", message_text, "bytes per message")
      ->capture_default_str();
  send_cmd->add_option("--rate", rate_text, "reserved rate (e.g. 200mbit); absent = best effort");
  send_cmd->add_option("--paths", paths, "HOST:PORT per path (multipath; first = connect address)")
      ->delimiter(',');
  send_cmd->add_option("--path-rates", path_rates_text, "reserved rate per path, comma-separated");
  send_cmd->add_option("--local-paths", locals, "local HOST:PORT to bind per path")
      ->delimiter(',');
  send_cmd->add_option("--inflight", send.inflight_messages,
                       "messages in flight (0 = 64 MiB worth, at least 2)")
      ->capture_default_str();
  send_cmd->add_option("--channels", send.channels,
                       "split the transfer over this many channels (rate / channels each; "
                       "recv --channels must match)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  send_cmd->add_flag("--fec", send.fec, "Reed-Solomon FEC");
  send_cmd->add_option("--fec-k", send.fec_data_segments, "data segments per FEC block")
      ->capture_default_str();
  send_cmd->add_option("--fec-m", send.fec_parity_segments, "max parity segments per block")
      ->capture_default_str();
  send_cmd->add_option("--mtu", send.mtu_bytes, "IP MTU of the path")->capture_default_str();
  send_cmd->add_option("--backend", send.backend, "transport backend[:backend_config]")
      ->capture_default_str();
  double send_timeout_s = 900;
  send_cmd->add_option("--timeout", send_timeout_s, "seconds for the whole transfer")
      ->capture_default_str();
  bench::SecurityFlags send_security;
  add_security_flags(send_cmd, send_security);
  send_cmd->add_flag("--json", send.json, "print one JSON object");

  bench::RecvOptions recv;
  std::string recv_rate_text;
  double accept_timeout_s = 60, recv_timeout_s = 900;
  auto* recv_cmd = transport->add_subcommand("recv", "receive and check one transfer");
  recv_cmd->add_option("--listen", recv.listen, "HOST:PORT to listen on")->capture_default_str();
  recv_cmd->add_option("--rate", recv_rate_text, "reserved rate of the ACK direction");
  recv_cmd->add_option("--mtu", recv.mtu_bytes, "IP MTU of the path")->capture_default_str();
  recv_cmd->add_option("--backend", recv.backend, "transport backend[:backend_config]")
      ->capture_default_str();
  recv_cmd->add_option("--accept-timeout", accept_timeout_s, "seconds to wait for the sender")
      ->capture_default_str();
  recv_cmd->add_option("--timeout", recv_timeout_s, "seconds for the whole transfer")
      ->capture_default_str();
  recv_cmd->add_option("--channels", recv.channels,
                       "channels to accept (send --channels), each a share of the transfer")
      ->capture_default_str()->check(CLI::Range(1, 64));
  recv_cmd->add_flag("--no-recycle{false}", recv.recycle,
                     "drop each message instead of handing its buffer back (comparisons)");
  bench::SecurityFlags recv_security;
  add_security_flags(recv_cmd, recv_security);
  recv_cmd->add_flag("--json", recv.json, "print one JSON object");

  bench::PingPongOptions pingpong;
  std::string pp_size_text = "64";
  auto* pp_cmd = transport->add_subcommand(
      "pingpong", "small-message round trips over 127.0.0.1 (detwan channel or --raw-udp)");
  pp_cmd->add_flag("--raw-udp", pingpong.raw_udp, "plain UDP sockets (the baseline)");
  pp_cmd->add_option("--backend", pingpong.backend, "transport backend")->capture_default_str();
  pp_cmd->add_option("--size", pp_size_text, "message bytes")->capture_default_str();
  pp_cmd->add_option("--count", pingpong.count, "measured round trips")->capture_default_str();
  pp_cmd->add_option("--warmup", pingpong.warmup, "unmeasured round trips first")
      ->capture_default_str();
  pp_cmd
      ->add_option("--progress", pingpong.progress,
                   "who runs the loop: callback (the next ping leaves from the reply's "
                   "callback on the progress thread), wait (this thread waits for each "
                   "reply), inline (no progress threads: each end's own thread runs "
                   "Endpoint::progress)")
      ->check(CLI::IsMember({"callback", "wait", "inline"}))
      ->capture_default_str();
  bench::SecurityFlags pp_security;
  pp_cmd->add_flag("--insecure", pp_security.insecure, "unauthenticated channels (mode none)");
  pp_cmd->add_flag("--encrypt", pp_security.encrypt, "encrypt payloads (default: authenticate)");
  pp_cmd->add_flag("--json", pingpong.json, "print one JSON object");

  bench::InfoOptions info;
  auto* info_cmd = transport->add_subcommand(
      "info", "bytes per data datagram of the protocol (measured on 127.0.0.1)");
  info_cmd->add_option("--mtu", info.mtu_bytes, "IP MTU")->capture_default_str();
  info_cmd->add_option("--backend", info.backend, "datagram backend")->capture_default_str();
  bench::SecurityFlags info_security;
  info_cmd->add_flag("--insecure", info_security.insecure, "unauthenticated channels (mode none)");
  info_cmd->add_flag("--encrypt", info_security.encrypt, "encrypt payloads (default: authenticate)");
  info_cmd->add_flag("--json", info.json, "print one JSON object");

  try {
    app.parse(argc, argv);
    if (send_cmd->parsed()) {
      send.size_bytes = size_or_throw("--size", size_text);
      send.message_bytes = size_or_throw("--message-size", message_text);
      if (send.message_bytes == 0 || send.size_bytes == 0) {
        throw CLI::ValidationError("--size/--message-size", "must be > 0");
      }
      if (!rate_text.empty()) send.rate_bps = rate_or_throw("--rate", rate_text);
      if (!paths.empty()) send.remotes = paths;
      send.locals = locals;
      if (!path_rates_text.empty()) {
        for (std::string_view rate : common::split(path_rates_text, ',')) {
          send.path_rates_bps.push_back(rate_or_throw("--path-rates", std::string(rate)));
        }
        if (send.path_rates_bps.size() != send.remotes.size()) {
          throw CLI::ValidationError("--path-rates", "needs one rate per path of --paths");
        }
      }
      if (!locals.empty() && locals.size() != send.remotes.size()) {
        throw CLI::ValidationError("--local-paths", "needs one address per path of --paths");
      }
      send.timeout_ns = static_cast<int64_t>(send_timeout_s * 1e9);
      send.security = security_or_throw(send_security);
      return bench::run_send(send);
    }
    if (recv_cmd->parsed()) {
      if (!recv_rate_text.empty()) recv.rate_bps = rate_or_throw("--rate", recv_rate_text);
      recv.accept_timeout_ns = static_cast<int64_t>(accept_timeout_s * 1e9);
      recv.timeout_ns = static_cast<int64_t>(recv_timeout_s * 1e9);
      recv.security = security_or_throw(recv_security);
      return bench::run_recv(recv);
    }
    if (pp_cmd->parsed()) {
      pingpong.size_bytes = size_or_throw("--size", pp_size_text);
      pingpong.security = security_or_throw(pp_security, true);
      return bench::run_pingpong(pingpong);
    }
    info.security = security_or_throw(info_security, true);
    return bench::run_info(info);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (wants_lab(argc, argv)) return bench::exec_lab(argc, argv);
  if (bench::wants_collective_lab(argc, argv)) return bench::exec_collective_lab(argc, argv);
  try {
    if (bench::is_collective_command(argc, argv)) return bench::run_collective_command(argc, argv);
    return run_cli(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwan-bench: %s\n", e.what());
    return 1;
  }
}
