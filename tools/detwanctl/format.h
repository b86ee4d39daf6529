#pragma once
// detwanctl's human output: one block per reservation, tables for lists, paths and topology.
#include <string>

#include <boost/json.hpp>

namespace detwan::tools::ctl {

std::string format_reservation(const boost::json::object& r);
std::string format_reservation_list(const boost::json::array& list);
std::string format_paths(const boost::json::object& answer);
std::string format_topology(const boost::json::object& topology);
std::string format_error(const boost::json::object& error_body);
// "2026-12-01 14:00:00 UTC" from Unix ns.
std::string format_time(int64_t unix_ns);

}  // namespace detwan::tools::ctl
