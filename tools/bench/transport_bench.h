#pragma once
// detwan-bench transport: one side of a bulk transfer (send / recv), the small-message
// ping-pong (detwan and plain UDP, same binary), and `info` (the protocol's per-datagram
// overhead, measured on the wire). docs: tools/lab/transport.py drives them across the lab.
//
// Every subcommand returns an exit status (docs/errors.md): 0 success, 1 runtime failure (the
// JSON document then carries "error"), 2 bad command line. With json they print ONE JSON object
// on stdout; progress and "listening ADDRESS" go to stderr.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "transport/security.h"

namespace detwan::bench {

// Wire framing between send and recv, on top of the messages themselves: the sender first sends
// a 32-byte plan ("DWBPLAN1", total bytes, message bytes, message count, u64 little-endian);
// the receiver answers the last data message with an 8-byte "DWBDONE1" so the sender knows every
// acknowledgement reached it before it closes.
inline constexpr size_t kPlanBytes = 32;

// "--backend NAME[:CONFIG]": the backend's name, and CONFIG as its EndpointOptions.backend_config
// (e.g. "udp:gso=0,gro=0", "udp:busy_poll_us=50").
inline std::pair<std::string, std::string> split_backend(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return {spec, ""};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

struct SendOptions {
  std::string backend = "udp";
  std::vector<std::string> remotes;        // first = connect address; >1 = multipath
  std::vector<std::string> locals;         // optional local bind per path
  std::vector<int64_t> path_rates_bps;     // per path; empty = rate_bps for each
  int64_t rate_bps = 0;                    // 0 = best effort (congestion control)
  uint64_t size_bytes = uint64_t{1} << 30;
  uint64_t message_bytes = uint64_t{4} << 20;
  int inflight_messages = 0;               // 0 = automatic (64 MiB of messages, at least 2)
  // Channels the transfer is split over (equal shares, rate / channels each, one sending thread
  // per channel); the receiver must be started with the same count.
  int channels = 1;
  bool fec = false;
  int fec_data_segments = 32;
  int fec_parity_segments = 2;
  int mtu_bytes = 1500;
  int64_t timeout_ns = 900'000'000'000;    // whole transfer
  int64_t connect_timeout_ns = 10'000'000'000;
  transport::Security security;  // --key-file / --encrypt / --insecure (transport_security.h)
  bool json = false;
};

struct RecvOptions {
  std::string backend = "udp";
  std::string listen = "0.0.0.0:5400";
  int64_t rate_bps = 0;                    // accept_options.rate_bps (the ACK direction)
  int mtu_bytes = 1500;
  int64_t accept_timeout_ns = 60'000'000'000;
  int64_t timeout_ns = 900'000'000'000;
  bool recycle = true;  // hand each checked message back (Channel::recycle), as applications do
  int channels = 1;     // channels to accept, each an independent share of the transfer
  transport::Security security;  // --key-file / --encrypt / --insecure (transport_security.h)
  bool json = false;
};

struct PingPongOptions {
  bool raw_udp = false;                    // plain UDP sockets instead of a detwan channel
  std::string backend = "udp";
  uint64_t size_bytes = 64;
  int count = 10'000;
  int warmup = 100;
  // callback: the next ping leaves from the reply's callback (progress thread); wait: the
  // calling thread waits for each reply (two thread hand-overs per round trip); inline: no
  // progress thread at either end (EndpointOptions::inline_progress).
  std::string progress = "callback";
  transport::Security security;  // both ends in this process: a random key, or --insecure
  bool json = false;
};

struct InfoOptions {
  std::string backend = "udp";
  int mtu_bytes = 1500;
  transport::Security security;  // both ends in this process: a random key, or --insecure
  bool json = false;
};

int run_send(const SendOptions& options);
int run_recv(const RecvOptions& options);
int run_pingpong(const PingPongOptions& options);
int run_info(const InfoOptions& options);

}  // namespace detwan::bench
