#include "tools/wanem/engine/spec.h"
#include "tools/wanem/engine/jitter.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/strings.h"

#include "common/units.h"
#include "tools/wanem/engine/spec_text.h"

namespace detwan::wanem {
namespace {

using common::Error;
using common::ErrorCode;
using common::Result;
using spec_text::format_dscp;
using spec_text::format_duration;
using spec_text::format_fraction;
using spec_text::format_ge;
using spec_text::format_ports;
using spec_text::format_size;
using spec_text::format_windows;

// Upper bound of every duration in a spec. Keeps sums of absolute times, delays and jitter
// samples far inside int64 (a CLOCK_REALTIME timestamp is ~1.8e18 ns).
constexpr int64_t kMaxDurationNs = 86'400'000'000'000;  // 1 day
constexpr uint32_t kMinCrossFrameBytes = 64;
constexpr uint32_t kMaxCrossFrameBytes = 65535;

constexpr std::string_view kKnownKeys =
    "delay, jitter, jitter-dist, loss, ge, dup, reorder, reorder-ahead, rate, queue, cross, "
    "cross-burst, cross-size, prio-dscp, prio-port, prio-queue, down, seed";

using common::lower;
using common::trim;

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (;;) {
    const size_t end = text.find(separator, begin);
    parts.push_back(trim(text.substr(begin, end == std::string_view::npos ? end : end - begin)));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

std::unexpected<Error> token_error(std::string_view token, std::string_view why) {
  return common::make_error(ErrorCode::kInvalidArgument, fmt::format("'{}': {}", token, why));
}

// common/units errors read "'<value>': why"; the token names the value already, so keep `why`.
std::string reason_of(const Error& error, std::string_view value) {
  const std::string prefix = fmt::format("'{}': ", trim(value));
  if (error.message.starts_with(prefix)) return error.message.substr(prefix.size());
  return error.message;
}

// Text of the token that set `key`, for messages about cross-field rules. Tokens parsed in
// this call are quoted verbatim; fields inherited from a base spec are shown canonically.
struct TokenText {
  std::string_view key;
  std::string_view token;
};
using TokenTexts = std::vector<TokenText>;

bool is_fraction(double v) { return v >= 0.0 && v <= 1.0; }  // false for NaN

// ---- value parsers: each returns the reason (without the token) on failure -----------------

struct Reason {
  std::string text;
};
template <typename T>
using Parsed = std::expected<T, Reason>;

Parsed<double> parse_fraction_value(std::string_view value) {
  auto parsed = common::parse_fraction(value);
  if (parsed) return *parsed;
  // A well-formed number outside [0, 1] gets the short, uniform reason.
  std::string_view number = trim(value);
  if (number.ends_with('%')) number.remove_suffix(1);
  double v = 0.0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec == std::errc() && end == number.data() + number.size() && std::isfinite(v)) {
    return std::unexpected(Reason{"fraction must be in [0, 1]"});
  }
  return std::unexpected(Reason{reason_of(parsed.error(), value)});
}

Parsed<int64_t> parse_duration_value(std::string_view key, std::string_view value) {
  auto parsed = common::parse_duration_ns(value);
  if (!parsed) {
    if (auto signed_value = common::parse_duration_ns(value, true);
        signed_value && *signed_value < 0) {
      return std::unexpected(Reason{fmt::format("negative {}", key)});
    }
    return std::unexpected(Reason{reason_of(parsed.error(), value)});
  }
  return *parsed;
}

Parsed<uint64_t> parse_unsigned(std::string_view value, uint64_t max, std::string_view what) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty() || v > max) {
    return std::unexpected(Reason{fmt::format("{} must be an integer in [0, {}]", what, max)});
  }
  return v;
}

Parsed<uint8_t> parse_dscp(std::string_view value) {
  const std::string name = lower(value);
  // Names of RFC 2474/2597/3246 code points: ef, csN, afXY.
  if (name == "ef") return uint8_t{46};
  if (name.size() == 3 && name.starts_with("cs") && name[2] >= '0' && name[2] <= '7') {
    return static_cast<uint8_t>((name[2] - '0') * 8);
  }
  if (name.size() == 4 && name.starts_with("af") && name[2] >= '1' && name[2] <= '4' &&
      name[3] >= '1' && name[3] <= '3') {
    return static_cast<uint8_t>((name[2] - '0') * 8 + (name[3] - '0') * 2);
  }
  auto v = parse_unsigned(value, 63, "DSCP");
  if (!v) {
    return std::unexpected(
        Reason{"DSCP must be an integer in [0, 63] or a name (ef, af11..af43, cs0..cs7)"});
  }
  return static_cast<uint8_t>(*v);
}

// ---- key handlers ----------------------------------------------------------------------------

using Handler = Parsed<void> (*)(std::string_view key, std::string_view value,
                                 ImpairmentSpec& spec);

Parsed<void> set_duration(std::string_view key, std::string_view value, int64_t& field) {
  auto v = parse_duration_value(key, value);
  if (!v) return std::unexpected(v.error());
  field = *v;
  return {};
}

Parsed<void> set_fraction(std::string_view value, double& field) {
  auto v = parse_fraction_value(value);
  if (!v) return std::unexpected(v.error());
  field = *v;
  return {};
}

Parsed<void> on_delay(std::string_view k, std::string_view v, ImpairmentSpec& s) {
  return set_duration(k, v, s.delay_ns);
}
Parsed<void> on_jitter(std::string_view k, std::string_view v, ImpairmentSpec& s) {
  return set_duration(k, v, s.jitter_ns);
}
Parsed<void> on_reorder_ahead(std::string_view k, std::string_view v, ImpairmentSpec& s) {
  return set_duration(k, v, s.reorder_ahead_ns);
}
Parsed<void> on_cross_burst(std::string_view k, std::string_view v, ImpairmentSpec& s) {
  return set_duration(k, v, s.cross_burst_ns);
}
Parsed<void> on_loss(std::string_view, std::string_view v, ImpairmentSpec& s) {
  return set_fraction(v, s.loss);
}
Parsed<void> on_dup(std::string_view, std::string_view v, ImpairmentSpec& s) {
  return set_fraction(v, s.duplicate);
}
Parsed<void> on_reorder(std::string_view, std::string_view v, ImpairmentSpec& s) {
  return set_fraction(v, s.reorder);
}
Parsed<void> on_cross(std::string_view, std::string_view v, ImpairmentSpec& s) {
  return set_fraction(v, s.cross_share);
}

Parsed<void> on_jitter_dist(std::string_view, std::string_view value, ImpairmentSpec& s) {
  const std::string name = lower(value);
  if (name == "uniform") {
    s.jitter_distribution = JitterDistribution::kUniform;
  } else if (name == "normal") {
    s.jitter_distribution = JitterDistribution::kNormal;
  } else if (name == "pareto-normal" || name == "paretonormal") {
    s.jitter_distribution = JitterDistribution::kParetoNormal;
  } else {
    return std::unexpected(Reason{"unknown distribution (known: uniform, normal, pareto-normal)"});
  }
  return {};
}

Parsed<void> on_ge(std::string_view, std::string_view value, ImpairmentSpec& s) {
  if (lower(value) == "none") {
    s.ge = GilbertElliott{};
    return {};
  }
  const auto parts = split(value, '/');
  if (parts.size() < 2 || parts.size() > 4) {
    return std::unexpected(Reason{"expected P/R[/1-H[/1-K]] (fractions)"});
  }
  GilbertElliott ge;
  double* fields[] = {&ge.p_good_to_bad, &ge.r_bad_to_good, &ge.loss_in_bad, &ge.loss_in_good};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (auto ok = set_fraction(parts[i], *fields[i]); !ok) return ok;
  }
  ge.enabled = true;
  s.ge = ge;
  return {};
}

Parsed<void> on_rate(std::string_view, std::string_view value, ImpairmentSpec& s) {
  if (trim(value) == "0") {
    s.rate_bps = 0;
    return {};
  }
  auto v = common::parse_rate_bps(value);
  if (!v) return std::unexpected(Reason{reason_of(v.error(), value)});
  s.rate_bps = *v;
  return {};
}

Parsed<void> on_queue(std::string_view, std::string_view value, ImpairmentSpec& s) {
  auto v = common::parse_size_bytes(value);
  if (!v) return std::unexpected(Reason{reason_of(v.error(), value)});
  s.queue_bytes = *v;
  return {};
}

Parsed<void> on_prio_queue(std::string_view, std::string_view value, ImpairmentSpec& s) {
  auto v = common::parse_size_bytes(value);
  if (!v) return std::unexpected(Reason{reason_of(v.error(), value)});
  s.prio_queue_bytes = *v;
  return {};
}

Parsed<void> on_cross_size(std::string_view, std::string_view value, ImpairmentSpec& s) {
  auto v = common::parse_size_bytes(value);
  if (!v) return std::unexpected(Reason{reason_of(v.error(), value)});
  if (*v < kMinCrossFrameBytes || *v > kMaxCrossFrameBytes) {
    return std::unexpected(Reason{fmt::format("cross-size must be in [{}, {}] bytes",
                                              kMinCrossFrameBytes, kMaxCrossFrameBytes)});
  }
  s.cross_frame_bytes = static_cast<uint32_t>(*v);
  return {};
}

Parsed<void> on_prio_dscp(std::string_view, std::string_view value, ImpairmentSpec& s) {
  std::vector<uint8_t> values;
  if (lower(value) != "none") {
    for (std::string_view part : split(value, '/')) {
      auto v = parse_dscp(part);
      if (!v) return std::unexpected(v.error());
      values.push_back(*v);
    }
  }
  s.prio_dscp = std::move(values);
  return {};
}

Parsed<void> on_prio_port(std::string_view, std::string_view value, ImpairmentSpec& s) {
  std::vector<PortRange> ranges;
  if (lower(value) != "none") {
    for (std::string_view part : split(value, '/')) {
      const size_t dash = part.find('-');
      auto first = parse_unsigned(trim(part.substr(0, dash)), 65535, "port");
      if (!first) return std::unexpected(first.error());
      uint64_t last = *first;
      if (dash != std::string_view::npos) {
        auto l = parse_unsigned(trim(part.substr(dash + 1)), 65535, "port");
        if (!l) return std::unexpected(l.error());
        last = *l;
      }
      if (last < *first)
        return std::unexpected(Reason{"port range must be FIRST-LAST with FIRST <= LAST"});
      ranges.push_back({static_cast<uint16_t>(*first), static_cast<uint16_t>(last)});
    }
  }
  s.prio_ports = std::move(ranges);
  return {};
}

Parsed<void> on_down(std::string_view, std::string_view value, ImpairmentSpec& s) {
  std::vector<DownWindow> windows;
  if (lower(value) != "none") {
    for (std::string_view part : split(value, '/')) {
      const size_t dash = part.find('-', 1);  // a leading '-' is a sign, not the separator
      if (dash == std::string_view::npos) {
        return std::unexpected(Reason{"window must be START-END (e.g. 5s-7s)"});
      }
      auto start = parse_duration_value("window start", trim(part.substr(0, dash)));
      if (!start) return std::unexpected(start.error());
      auto end = parse_duration_value("window end", trim(part.substr(dash + 1)));
      if (!end) return std::unexpected(end.error());
      windows.push_back({*start, *end});
    }
  }
  s.down = std::move(windows);
  return {};
}

Parsed<void> on_seed(std::string_view, std::string_view value, ImpairmentSpec& s) {
  auto v = parse_unsigned(value, UINT64_MAX, "seed");
  if (!v) return std::unexpected(v.error());
  s.seed = *v;
  return {};
}

struct KeyEntry {
  std::string_view key;
  Handler handler;
};

// Registry of keys, in canonical (format_spec) order.
constexpr std::array<KeyEntry, 18> kKeys = {{
    {"delay", on_delay},
    {"jitter", on_jitter},
    {"jitter-dist", on_jitter_dist},
    {"loss", on_loss},
    {"ge", on_ge},
    {"dup", on_dup},
    {"reorder", on_reorder},
    {"reorder-ahead", on_reorder_ahead},
    {"rate", on_rate},
    {"queue", on_queue},
    {"cross", on_cross},
    {"cross-burst", on_cross_burst},
    {"cross-size", on_cross_size},
    {"prio-dscp", on_prio_dscp},
    {"prio-port", on_prio_port},
    {"prio-queue", on_prio_queue},
    {"down", on_down},
    {"seed", on_seed},
}};

// ---- cross-field validation ------------------------------------------------------------------

std::string token_for(const TokenTexts& tokens, std::string_view key,
                      const std::string& canonical) {
  for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) {
    if (it->key == key) return std::string(it->token);
  }
  return fmt::format("{}={}", key, canonical);
}

Result<void> validate_with(const ImpairmentSpec& s, const TokenTexts& tokens) {
  auto fail = [&](std::string_view key, const std::string& canonical, std::string_view why) {
    return token_error(token_for(tokens, key, canonical), why);
  };
  struct DurationField {
    std::string_view key;
    int64_t value;
    bool positive;
  };
  const DurationField durations[] = {{"delay", s.delay_ns, false},
                                     {"jitter", s.jitter_ns, false},
                                     {"reorder-ahead", s.reorder_ahead_ns, false},
                                     {"cross-burst", s.cross_burst_ns, true}};
  for (const DurationField& d : durations) {
    const std::string canonical = format_duration(d.value);
    if (d.value < 0) return fail(d.key, canonical, fmt::format("negative {}", d.key));
    if (d.positive && d.value == 0) return fail(d.key, canonical, "must be positive");
    if (d.value > kMaxDurationNs) {
      return fail(d.key, canonical,
                  fmt::format("must be at most {}", format_duration(kMaxDurationNs)));
    }
  }
  switch (s.jitter_distribution) {
    case JitterDistribution::kUniform:
    case JitterDistribution::kNormal:
    case JitterDistribution::kParetoNormal:
      break;
    default:
      return fail("jitter-dist", fmt::format("{}", static_cast<int>(s.jitter_distribution)),
                  "unknown distribution (known: uniform, normal, pareto-normal)");
  }
  const std::pair<std::string_view, double> fractions[] = {
      {"loss", s.loss}, {"dup", s.duplicate}, {"reorder", s.reorder}, {"cross", s.cross_share}};
  for (const auto& [key, value] : fractions) {
    if (!is_fraction(value)) return fail(key, format_fraction(value), "fraction must be in [0, 1]");
  }
  if (s.ge.enabled && !(is_fraction(s.ge.p_good_to_bad) && is_fraction(s.ge.r_bad_to_good) &&
                        is_fraction(s.ge.loss_in_bad) && is_fraction(s.ge.loss_in_good))) {
    return fail("ge", format_ge(s.ge), "fraction must be in [0, 1]");
  }
  if (s.cross_share > 0.0 && s.rate_bps == 0) {
    return fail("cross", format_fraction(s.cross_share), "cross needs rate");
  }
  if (s.cross_frame_bytes < kMinCrossFrameBytes || s.cross_frame_bytes > kMaxCrossFrameBytes) {
    return fail("cross-size", format_size(s.cross_frame_bytes),
                fmt::format("cross-size must be in [{}, {}] bytes", kMinCrossFrameBytes,
                            kMaxCrossFrameBytes));
  }
  for (uint8_t v : s.prio_dscp) {
    if (v > 63)
      return fail("prio-dscp", format_dscp(s.prio_dscp), "DSCP must be an integer in [0, 63]");
  }
  for (const PortRange& r : s.prio_ports) {
    if (r.last < r.first) {
      return fail("prio-port", format_ports(s.prio_ports),
                  "port range must be FIRST-LAST with FIRST <= LAST");
    }
  }
  const std::string windows = format_windows(s.down);
  for (size_t i = 0; i < s.down.size(); ++i) {
    const DownWindow& w = s.down[i];
    if (w.start_ns < 0) return fail("down", windows, "negative window start");
    if (w.end_ns <= w.start_ns) return fail("down", windows, "window end must be after its start");
    if (w.end_ns > kMaxDurationNs) {
      return fail("down", windows,
                  fmt::format("windows must end by {}", format_duration(kMaxDurationNs)));
    }
    if (i > 0 && w.start_ns < s.down[i - 1].end_ns) {
      return fail("down", windows, "windows must be in increasing order and must not overlap");
    }
  }
  return {};
}

}  // namespace

int64_t ImpairmentSpec::min_delay_ns() const noexcept {
  int64_t least = delay_ns + JitterSampler(jitter_ns, jitter_distribution).min_offset_ns();
  if (reorder > 0.0) least -= reorder_ahead_ns;
  return least > 0 ? least : 0;
}

uint64_t ImpairmentSpec::effective_queue_bytes() const noexcept {
  if (queue_bytes != 0) return queue_bytes;
  if (rate_bps == 0) return 0;
  return std::max<uint64_t>(64 * 1024, rate_bps / 160);  // 50 ms at rate_bps, in bytes
}

Result<ImpairmentSpec> apply_spec(ImpairmentSpec base, std::string_view text) {
  TokenTexts tokens;
  if (!trim(text).empty()) {
    for (std::string_view token : split(text, ',')) {
      if (token.empty()) return token_error(text, "empty token (two commas, or a trailing comma)");
      const size_t eq = token.find('=');
      if (eq == std::string_view::npos) return token_error(token, "expected key=value");
      const std::string_view key = trim(token.substr(0, eq));
      const std::string_view value = trim(token.substr(eq + 1));
      const auto entry =
          std::find_if(kKeys.begin(), kKeys.end(), [&](const KeyEntry& e) { return e.key == key; });
      if (entry == kKeys.end()) {
        return token_error(token, fmt::format("unknown key (known: {})", kKnownKeys));
      }
      if (value.empty()) return token_error(token, "empty value");
      if (auto ok = entry->handler(key, value, base); !ok)
        return token_error(token, ok.error().text);
      tokens.push_back({entry->key, token});
    }
  }
  if (auto ok = validate_with(base, tokens); !ok) return std::unexpected(ok.error());
  return base;
}

Result<ImpairmentSpec> parse_spec(std::string_view text) {
  return apply_spec(ImpairmentSpec{}, text);
}

Result<void> validate(const ImpairmentSpec& spec) { return validate_with(spec, {}); }

}  // namespace detwan::wanem
