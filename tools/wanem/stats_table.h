#pragma once
// Human-readable rendering of the `stats` JSON (docs/wanem.md) for `detwan-wanem stats`.
#include <string>

#include <boost/json/value.hpp>

namespace detwan::wanem {

// Port counters per side, then every engine counter as one row with an ab and a ba column
// (nested objects flattened to dotted names). Unknown shapes are printed, never rejected.
std::string format_stats_table(const boost::json::value& stats);

}  // namespace detwan::wanem
