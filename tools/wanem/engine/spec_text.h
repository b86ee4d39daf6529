#pragma once
// Private to the engine: canonical text of spec values, shared by spec.cc (error messages that
// quote a field set programmatically) and spec_format.cc (format_spec). Each result reads back
// through the parser to exactly the same value.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/wanem/engine/spec.h"

namespace detwan::wanem::spec_text {

std::string format_fraction(double value);  // "0.1%", or a bare number if % would not round-trip
std::string format_duration(int64_t ns);    // "10ms", "1.5ms", or "<n>ns"
std::string format_rate(uint64_t bps);      // "1gbit", "0" for unlimited
std::string format_size(uint64_t bytes);    // "1mb", "1500b"
std::string_view distribution_name(JitterDistribution distribution);
std::string format_ge(const GilbertElliott& ge);  // "P/R[/1-H[/1-K]]"
std::string format_dscp(const std::vector<uint8_t>& values);
std::string format_ports(const std::vector<PortRange>& ranges);
std::string format_windows(const std::vector<DownWindow>& windows);

}  // namespace detwan::wanem::spec_text
