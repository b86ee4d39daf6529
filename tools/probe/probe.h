#pragma once
// detwan-probe: a one-way-delay probe for the lab's fidelity tests and benchmarks.
//
//   send: UDP packets carrying a sequence number and their CLOCK_REALTIME transmit time, paced
//         at absolute deadlines (clock_nanosleep TIMER_ABSTIME, 1 ns timer slack), then a fin
//         (sent a few times) with the number sent.
//   recv: records one-way delay (kernel receive timestamp - transmit time; every namespace of
//         one machine shares the clock), loss, loss bursts, reordering, duplicates and IPDV, and
//         prints one JSON object (receiver_stats.h).
//
// Both return the process exit status. Setup errors throw common::Failure.
#include <cstdint>
#include <string>

namespace detwan::probe {

struct SendOptions {
  std::string to;
  uint16_t port = 0;
  uint64_t pps = 1000;
  uint64_t count = 1000;
  uint32_t size_bytes = 64;  // UDP payload
  int dscp = -1;             // -1: leave the default
  bool json = false;
};

struct RecvOptions {
  std::string bind = "0.0.0.0";
  uint16_t port = 0;
  double duration_s = 60.0;  // hard bound on the run
  uint64_t count = 0;        // stop once this many distinct packets arrived; 0: no such stop
  // After the sender's fin: wait this long (or 2 x the largest one-way delay, if more) for
  // stragglers, then stop.
  double linger_s = 0.2;
  bool json = false;
};

int run_send(const SendOptions& options);
int run_recv(const RecvOptions& options);

}  // namespace detwan::probe
