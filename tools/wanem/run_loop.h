#pragma once
// The part of every backend's run() that does not depend on the backend: build the engines,
// run the forwarder on the calling thread, free what is left, and snapshot the statistics.
// Instantiated in each backend's port_datapath.cc, next to the port's inline datapath.
#include <cstring>
#include <utility>

#include "common/clock.h"
#include "tools/wanem/backend.h"
#include "tools/wanem/forwarder.h"
#include "tools/wanem/session.h"

namespace detwan::wanem {

template <Port P, common::ClockSource C>
common::Result<RunOutcome> run_forwarding(P& port, const C& clock, const BackendRun& run,
                                          uint32_t max_frames, std::string_view backend) {
  const int64_t start_ns = clock.now_ns();
  Session session(run.options.spec_ab, run.options.spec_ba, start_ns, max_frames,
                  std::string(backend));
  RtGovernor governor = RtGovernor::for_this_thread(run.options.rt_priority);
  ForwarderOptions forwarder_options;
  forwarder_options.busy_poll = run.options.busy_poll;
  forwarder_options.governor = &governor;
  forwarder_options.rx_coalesce_ns = run.options.rx_coalesce_ns;
  if (run.options.duration_ns > 0) forwarder_options.end_ns = start_ns + run.options.duration_ns;
  Forwarder<P, C> forwarder(port, clock, session, run.posts, run.stop, forwarder_options);
  if (!forwarder.busy_poll() && run.options.rt_priority > 0) {
    if (const int error = governor.start(clock.now_ns()); error != 0) {
      run.log->warn(
          "poll thread stays SCHED_OTHER (SCHED_FIFO {}: {}): expect millisecond "
          "release tails on a loaded machine",
          run.options.rt_priority, std::strerror(error));
    }
  }
  run.log->info("forwarding {} <-> {} ({}, {})", run.options.iface_a, run.options.iface_b, backend,
                forwarder.busy_poll() ? "busy-polling" : "sleeping when idle");
  forwarder.run_st();
  run.posts.close();  // control requests from now on get "shutting down"
  port.refresh_counters_st();
  RunOutcome outcome;
  outcome.final_stats_json = session.stats_json_st(forwarder.view_st(clock.now_ns()));
  forwarder.drain_st();
  return outcome;
}

}  // namespace detwan::wanem
