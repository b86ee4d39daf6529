#pragma once
// Fault injection of the loopback backend, from EndpointOptions.backend_config:
//   "loss=0.01,delay=2ms,jitter=1ms,reorder=0.05,duplicate=0.01,corrupt=0.001,rate=100mbit,seed=7"
// Every key is optional; an unknown or repeated key, or a bad value, is kInvalidArgument naming
// the token. The faults apply to the datagrams an endpoint SENDS (like netem on egress), so a
// test configures both endpoints for symmetric impairment.
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace detwan::transport::loopback {

struct FaultConfig {
  double loss = 0.0;        // fraction of datagrams dropped
  int64_t delay_ns = 0;     // one-way delay added to every datagram
  int64_t jitter_ns = 0;    // uniform extra delay in [-jitter, +jitter] (never before departure)
  double reorder = 0.0;     // fraction held back by an extra max(2 x jitter, 1 ms): overtaken
  double duplicate = 0.0;   // fraction delivered twice
  double corrupt = 0.0;     // fraction with one byte flipped
  uint64_t rate_bps = 0;    // serialisation rate of the sender's link; 0 = unlimited
  uint64_t seed = 1;        // seed of the fault RNG (deterministic fault pattern per seed)
};

common::Result<FaultConfig> parse_faults(std::string_view text);

}  // namespace detwan::transport::loopback
