// Canonical text of an ImpairmentSpec: format_spec() and the value formatters shared with the
// validator's messages. Every formatter's text reads back to exactly the same value.
#include <array>
#include <charconv>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/units.h"
#include "tools/wanem/engine/spec.h"
#include "tools/wanem/engine/spec_text.h"

namespace detwan::wanem {
namespace spec_text {

std::string format_fraction(double value) {
  // Shortest text that reads back to exactly `value`: a percentage when that round-trips
  // through common::parse_fraction (it divides by 100), else the bare number.
  auto shortest = [](double v) {
    std::array<char, 64> buffer{};
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), v);
    return std::string(buffer.data(), result.ptr);
  };
  const std::string percent = shortest(value * 100.0) + "%";
  if (auto back = common::parse_fraction(percent); back && *back == value) return percent;
  return shortest(value);
}

std::string format_duration(int64_t ns) {
  std::string text = common::format_duration_ns(ns);
  if (auto back = common::parse_duration_ns(text, true); back && *back == ns) return text;
  return fmt::format("{}ns", ns);
}

std::string format_rate(uint64_t bps) {
  if (bps == 0) return "0";
  std::string text = common::format_rate_bps(bps);
  if (auto back = common::parse_rate_bps(text); back && *back == bps) return text;
  return fmt::format("{}bit", bps);
}

std::string format_size(uint64_t bytes) {
  std::string text = common::format_size_bytes(bytes);
  if (auto back = common::parse_size_bytes(text); back && *back == bytes) return text;
  return fmt::format("{}b", bytes);
}

std::string_view distribution_name(JitterDistribution d) {
  switch (d) {
    case JitterDistribution::kUniform:
      return "uniform";
    case JitterDistribution::kNormal:
      return "normal";
    case JitterDistribution::kParetoNormal:
      return "pareto-normal";
  }
  return "?";
}

std::string format_ge(const GilbertElliott& ge) {
  std::string text =
      fmt::format("{}/{}", format_fraction(ge.p_good_to_bad), format_fraction(ge.r_bad_to_good));
  if (ge.loss_in_bad != 1.0 || ge.loss_in_good != 0.0) {
    text += "/" + format_fraction(ge.loss_in_bad);
  }
  if (ge.loss_in_good != 0.0) text += "/" + format_fraction(ge.loss_in_good);
  return text;
}

std::string format_dscp(const std::vector<uint8_t>& values) {
  std::string text;
  for (uint8_t v : values) text += fmt::format("{}{}", text.empty() ? "" : "/", v);
  return text;
}

std::string format_ports(const std::vector<PortRange>& ranges) {
  std::string text;
  for (const PortRange& r : ranges) {
    if (!text.empty()) text += '/';
    text += r.first == r.last ? fmt::format("{}", r.first) : fmt::format("{}-{}", r.first, r.last);
  }
  return text;
}

std::string format_windows(const std::vector<DownWindow>& windows) {
  std::string text;
  for (const DownWindow& w : windows) {
    if (!text.empty()) text += '/';
    text += format_duration(w.start_ns) + "-" + format_duration(w.end_ns);
  }
  return text;
}

}  // namespace spec_text

using namespace spec_text;  // NOLINT(google-build-using-namespace): this file's own helpers

std::string format_spec(const ImpairmentSpec& s) {
  const ImpairmentSpec d;
  std::vector<std::string> parts;
  auto add = [&](std::string_view key, const std::string& value) {
    parts.push_back(fmt::format("{}={}", key, value));
  };
  if (s.delay_ns != d.delay_ns) add("delay", format_duration(s.delay_ns));
  if (s.jitter_ns != d.jitter_ns) add("jitter", format_duration(s.jitter_ns));
  if (s.jitter_distribution != d.jitter_distribution) {
    add("jitter-dist", std::string(distribution_name(s.jitter_distribution)));
  }
  if (s.loss != d.loss) add("loss", format_fraction(s.loss));
  if (s.ge.enabled) add("ge", format_ge(s.ge));
  if (s.duplicate != d.duplicate) add("dup", format_fraction(s.duplicate));
  if (s.reorder != d.reorder) add("reorder", format_fraction(s.reorder));
  if (s.reorder_ahead_ns != d.reorder_ahead_ns)
    add("reorder-ahead", format_duration(s.reorder_ahead_ns));
  if (s.rate_bps != d.rate_bps) add("rate", format_rate(s.rate_bps));
  if (s.queue_bytes != d.queue_bytes) add("queue", format_size(s.queue_bytes));
  if (s.cross_share != d.cross_share) add("cross", format_fraction(s.cross_share));
  if (s.cross_burst_ns != d.cross_burst_ns) add("cross-burst", format_duration(s.cross_burst_ns));
  if (s.cross_frame_bytes != d.cross_frame_bytes)
    add("cross-size", format_size(s.cross_frame_bytes));
  if (!s.prio_dscp.empty()) add("prio-dscp", format_dscp(s.prio_dscp));
  if (!s.prio_ports.empty()) add("prio-port", format_ports(s.prio_ports));
  if (s.prio_queue_bytes != d.prio_queue_bytes) add("prio-queue", format_size(s.prio_queue_bytes));
  if (!s.down.empty()) add("down", format_windows(s.down));
  if (s.seed != d.seed) add("seed", fmt::format("{}", s.seed));
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace detwan::wanem
