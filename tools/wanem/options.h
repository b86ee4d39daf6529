#pragma once
// Settings of `detwan-wanem run`, from the command line and/or a YAML file (--config). The
// command line wins over the file; per-direction specs win over the shared one.
//
// Errors name their source: "wanem.yaml:4:7: field 'spec_ab': 'loss=120%': ..." or
// "--spec-ab: 'loss=120%': ...". They are thrown as common::Failure with ErrorCode::kConfig and
// turned into exit status 2 by main().
#include <cstdint>
#include <optional>
#include <string>

#include "tools/wanem/engine/spec.h"

namespace detwan::wanem {

// What the command line said; empty optionals were not given.
struct CommandLineSettings {
  std::optional<std::string> iface_a;
  std::optional<std::string> iface_b;
  std::optional<std::string> spec;
  std::optional<std::string> spec_ab;
  std::optional<std::string> spec_ba;
  std::optional<uint64_t> seed;
  std::optional<std::string> backend;
  std::optional<std::string> eal;
  std::optional<std::string> control;
  bool busy_poll = false;
  std::optional<std::string> config_file;
  std::optional<std::string> stats_json;
  std::optional<double> duration_s;
  std::optional<uint32_t> pool_frames;
  std::optional<uint32_t> rx_ring_frames;
  std::optional<int> rt_priority;
  std::optional<int64_t> rx_coalesce_us;
};

struct RunOptions {
  std::string iface_a;
  std::string iface_b;
  std::string backend = "packet";
  std::string eal;  // extra EAL arguments (dpdk backend), shell-split
  ImpairmentSpec spec_ab;
  ImpairmentSpec spec_ba;
  uint64_t seed = 1;         // ab uses seed, ba seed + 1, unless a spec names seed=
  std::string control_path;  // empty: no control socket
  bool busy_poll = false;
  std::string stats_json_path;  // empty: no final statistics file
  int64_t duration_ns = 0;      // 0: until SIGINT/SIGTERM
  uint32_t pool_frames = 0;     // frame buffers shared by both directions; 0: backend default
  // packet backend: frames of each interface's receive ring (PACKET_RX_RING, read in place);
  // 0: recvmmsg into the pool instead (a copy per frame).
  uint32_t rx_ring_frames = 4096;
  // SCHED_FIFO priority of the poll thread in sleeping mode (0: stay SCHED_OTHER). Under CFS a
  // sleeping emulator on a loaded machine wakes milliseconds late; as a real-time sleeper it
  // wakes within tens of microseconds and still costs nothing while idle. Never applied with
  // busy polling (a spinning real-time thread would starve its core).
  int rt_priority = 10;
  // Sleeping mode: arrivals may wait unread up to this long (never longer than either spec's
  // least delay) while a release is due that soon; one wake-up per release instead of one per
  // frame as well (ForwarderOptions::rx_coalesce_ns). 0: wake for every arrival.
  int64_t rx_coalesce_ns = 500'000;
};

// Merges the YAML file (if any) and the command line, parses and validates the specs. Throws
// common::Failure(kConfig) naming the bad field. Does not touch interfaces (the backend does).
RunOptions resolve_run_options(const CommandLineSettings& cli);

// Multi-line "key: value" rendering of the effective configuration, for the start-up log.
std::string describe(const RunOptions& options);

}  // namespace detwan::wanem
