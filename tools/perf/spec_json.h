#pragma once
// TestSpec and its enums as JSON and text: the control connection's "hello" (control.cc), the
// "test" object of the --json document (report_json.cc) and the table's header line
// (report_table.cc) all use these names, so a spec reads the same everywhere.
#include <string>

#include <boost/json.hpp>

#include "common/status.h"
#include "tools/perf/options.h"

namespace detwan::perf {

// "stream|throughput|pingpong", "forward|reverse|bidir", "periodic|poisson|burst",
// "auto|sync|estimate" (the command line's spellings).
const char* to_string(Mode mode) noexcept;
const char* to_string(Direction direction) noexcept;
const char* to_string(ScheduleKind kind) noexcept;
const char* to_string(ClockMode mode) noexcept;

// TestSpec <-> JSON. from_json names the missing or mistyped field ("spec.pps: ...").
boost::json::object spec_to_json(const TestSpec& spec);
common::Result<TestSpec> spec_from_json(const boost::json::value& value);

// Field getters for JSON objects from the network: the error names the key ("type: missing",
// "session: expected an integer").
common::Result<int64_t> get_int(const boost::json::object& o, const char* key);
common::Result<std::string> get_string(const boost::json::object& o, const char* key);

}  // namespace detwan::perf
