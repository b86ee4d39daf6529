#pragma once
// The readable form of a running gateway's stats JSON (gw::Engine::stats_json, schema in
// docs/gateway.md) printed by `detwan-gw stats`: per tunnel what it sent and dropped by reason,
// what it released, late and dropped, its one-way delay percentiles, playout and departure
// error; per port the I/O counters and receive drops by reason; per peer state, clock offset
// and round trip. Missing fields print as "-": an older or newer gateway is shown, not refused.
#include <string>

#include <boost/json/value.hpp>

namespace detwan::dataplane::daemon {

std::string format_stats_table(const boost::json::value& stats);

}  // namespace detwan::dataplane::daemon
