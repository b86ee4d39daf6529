#include "transport/loopback/faults.h"

#include <array>
#include <charconv>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/strings.h"
#include "common/units.h"

namespace detwan::transport::loopback {
namespace {

constexpr std::array<std::string_view, 8> kKeys = {"loss",    "delay",   "jitter", "reorder",
                                                   "duplicate", "corrupt", "rate",  "seed"};

common::Result<FaultConfig> bad(std::string_view token, const std::string& why) {
  return common::make_error(common::ErrorCode::kInvalidArgument,
                            fmt::format("loopback backend_config: '{}': {}", token, why));
}

}  // namespace

common::Result<FaultConfig> parse_faults(std::string_view text) {
  FaultConfig config;
  if (common::trim(text).empty()) return config;
  std::array<bool, kKeys.size()> seen{};
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view token = common::trim(text.substr(0, comma));
    const size_t equals = token.find('=');
    if (token.empty()) return bad(token, "empty setting (expected key=value)");
    if (equals == std::string_view::npos) return bad(token, "expected key=value");
    const std::string key = common::lower(common::trim(token.substr(0, equals)));
    const std::string_view value = common::trim(token.substr(equals + 1));
    size_t index = 0;
    while (index < kKeys.size() && kKeys[index] != key) ++index;
    if (index == kKeys.size()) {
      return bad(token, fmt::format("unknown key '{}' (allowed: {})", key, fmt::join(kKeys, ", ")));
    }
    if (seen[index]) return bad(token, fmt::format("key '{}' given twice", key));
    seen[index] = true;
    if (key == "delay" || key == "jitter") {
      auto ns = common::parse_duration_ns(value);
      if (!ns) return bad(token, ns.error().message);
      (key == "delay" ? config.delay_ns : config.jitter_ns) = *ns;
    } else if (key == "rate") {
      auto bps = common::parse_rate_bps(value);
      if (!bps) return bad(token, bps.error().message);
      config.rate_bps = *bps;
    } else if (key == "seed") {
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), config.seed);
      if (error != std::errc{} || end != value.data() + value.size() || value.empty()) {
        return bad(token, "seed must be an unsigned integer");
      }
    } else {
      auto fraction = common::parse_fraction(value);
      if (!fraction) return bad(token, fraction.error().message);
      double* target = key == "loss"      ? &config.loss
                       : key == "reorder" ? &config.reorder
                       : key == "duplicate" ? &config.duplicate
                                            : &config.corrupt;
      *target = *fraction;
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return config;
}

}  // namespace detwan::transport::loopback
