// detwan-probe: one-way-delay probe (see probe.h).
//   detwan-probe recv --bind ADDR --port P [--duration S] [--count N] [--json]
//   detwan-probe send --to ADDR --port P --pps N --count N [--size BYTES] [--dscp D] [--json]
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "common/version.h"
#include "tools/probe/probe.h"
#include "tools/probe/wire.h"

namespace {

int run_cli(int argc, char** argv) {
  using namespace detwan::probe;
  CLI::App app{"detwan-probe: one-way delay, loss and reordering between two lab hosts"};
  app.set_version_flag("--version", detwan::common::version_line("detwan-probe"));
  app.require_subcommand(1);

  SendOptions send;
  auto* send_cmd = app.add_subcommand("send", "send paced, timestamped UDP packets");
  send_cmd->add_option("--to", send.to, "destination address (numeric IPv4/IPv6)")->required();
  send_cmd->add_option("--port", send.port, "destination UDP port")->required();
  send_cmd->add_option("--pps", send.pps, "packets per second")
      ->required()
      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}));
  send_cmd->add_option("--count", send.count, "data packets to send")
      ->required()
      ->check(CLI::Range(uint64_t{1}, kMaxSeq - 1));
  send_cmd->add_option("--size", send.size_bytes, "UDP payload bytes")
      ->check(CLI::Range(static_cast<uint32_t>(kDataHeaderBytes),
                         static_cast<uint32_t>(kMaxPayloadBytes)))
      ->capture_default_str();
  send_cmd->add_option("--dscp", send.dscp, "DSCP of the packets (0..63)")
      ->check(CLI::Range(0, 63));
  send_cmd->add_flag("--json", send.json, "print the sender's summary as JSON");

  RecvOptions recv;
  auto* recv_cmd = app.add_subcommand("recv", "receive and measure; prints one report at the end");
  recv_cmd->add_option("--bind", recv.bind, "local address (numeric)")->capture_default_str();
  recv_cmd->add_option("--port", recv.port, "UDP port")->required();
  recv_cmd->add_option("--duration", recv.duration_s, "stop after this many seconds at most")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  recv_cmd->add_option("--count", recv.count,
                       "stop once this many distinct packets arrived; also the sent count when "
                       "the sender's fin is lost");
  recv_cmd->add_option("--linger", recv.linger_s, "seconds to wait for stragglers after the fin")
      ->check(CLI::Range(0.0, 5.0))
      ->capture_default_str();
  recv_cmd->add_flag("--json", recv.json, "print the report as JSON");

  CLI11_PARSE(app, argc, argv);
  return send_cmd->parsed() ? run_send(send) : run_recv(recv);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_cli(argc, argv);
  } catch (const detwan::common::Failure& e) {
    std::fprintf(stderr, "detwan-probe: %s\n", e.error().describe().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detwan-probe: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "detwan-probe: unknown error\n");
  }
  return 1;
}
