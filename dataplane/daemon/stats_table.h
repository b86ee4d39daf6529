#pragma once
// The readable form of a running gateway's stats JSON (gw::Engine::stats_json, schema in
// docs/gateway.md) printed by `detwan-gw stats`: per tunnel what it sent and dropped by reason,
// what it released, late and dropped, its one-way delay percentiles, playout and departure
// error; per port the I/O counters and receive drops by reason; per peer state, clock offset
// and round trip. Missing fields print as "-": an older or newer gateway is shown, not refused.
#include <string>
#include <string_view>

#include <boost/json/value.hpp>

namespace detwan::dataplane::daemon {

std::string format_stats_table(const boost::json::value& stats);

// `detwan-gw stats --watch`: what changed between two stats documents taken `seconds` apart, one
// line per tunnel (on-time packets/s sent and released, late and dropped in the interval, the
// delay p99 so far) and per port (bit/s and packets/s each way), each prefixed with `label`.
// Counters that went backwards (a restart) count as 0.
std::string format_stats_interval(const boost::json::value& before,
                                  const boost::json::value& now, double seconds,
                                  std::string_view label);

}  // namespace detwan::dataplane::daemon
