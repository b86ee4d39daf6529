#include "common/prometheus.h"

#include <array>
#include <cmath>

#include <fmt/format.h>

namespace detwan::common::prometheus {
namespace {

std::string label_text(const Labels& labels, std::string_view extra_name = {},
                       std::string_view extra_value = {}) {
  std::string out;
  for (const auto& [name, value] : labels) {
    out += out.empty() ? "{" : ",";
    out += fmt::format("{}=\"{}\"", name, escape_label(value));
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += fmt::format("{}=\"{}\"", extra_name, escape_label(extra_value));
  }
  if (!out.empty()) out += "}";
  return out;
}

constexpr size_t kMaxBounds = 32;

}  // namespace

std::string escape_label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char ch : value) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '"') {
      out += "\\\"";
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return out;
}

void Exposition::counter(std::string_view name, std::string_view help, const Labels& labels,
                         uint64_t value) {
  fmt::format_to(std::back_inserter(add(name, help, "counter").lines), "{}{} {}\n", name,
                 label_text(labels), value);
}

void Exposition::table_counter(std::string_view prefix, std::string_view metric,
                               std::string_view help, const Labels& labels,
                               std::string_view label_name, std::string_view label_value,
                               uint64_t value) {
  std::string name;
  name.reserve(prefix.size() + metric.size());
  name.append(prefix).append(metric);
  if (label_name.empty()) {
    counter(name, help, labels, value);
    return;
  }
  Labels with_label = labels;
  with_label.emplace_back(label_name, std::string(label_value));
  counter(name, help, with_label, value);
}

void Exposition::gauge(std::string_view name, std::string_view help, const Labels& labels,
                       double value) {
  fmt::format_to(std::back_inserter(add(name, help, "gauge").lines), "{}{} {}\n", name,
                 label_text(labels), value);
}

void Exposition::histogram_ns(std::string_view name, std::string_view help, const Labels& labels,
                              const LogLinearHistogram& h,
                              std::span<const double> bounds_seconds) {
  Family& f = add(name, help, "histogram");
  const size_t n = std::min(bounds_seconds.size(), kMaxBounds);
  std::array<int64_t, kMaxBounds> bounds_ns{};
  std::array<uint64_t, kMaxBounds> counts{};
  for (size_t i = 0; i < n; ++i) {
    bounds_ns[i] = static_cast<int64_t>(std::llround(bounds_seconds[i] * 1e9));
  }
  h.counts_at_or_below(std::span(bounds_ns.data(), n), std::span(counts.data(), n));
  // One label prefix for every bucket line: `name_bucket{labels,le="` (label text built once).
  const std::string plain = label_text(labels);
  std::string prefix = fmt::format("{}_bucket{{", name);
  if (plain.size() > 2) prefix.append(plain, 1, plain.size() - 2).append(",");
  prefix += "le=\"";
  auto out = std::back_inserter(f.lines);
  for (size_t i = 0; i < n; ++i) {
    f.lines += prefix;
    fmt::format_to(out, "{}\"}} {}\n", bounds_seconds[i], counts[i]);  // shortest round trip
  }
  f.lines += prefix;
  fmt::format_to(out, "+Inf\"}} {}\n", h.count());
  fmt::format_to(out, "{}_sum{} {}\n", name, plain,
                 h.mean() * static_cast<double>(h.count()) / 1e9);
  fmt::format_to(out, "{}_count{} {}\n", name, plain, h.count());
}

std::string Exposition::text() const {
  std::string out;
  size_t bytes = 0;
  for (const Family& f : families_) bytes += f.lines.size() + 2 * f.name.size() + f.help.size() + 32;
  out.reserve(bytes);
  for (const Family& f : families_) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name,
                   f.type);
    out += f.lines;
  }
  return out;
}

Exposition::Family& Exposition::add(std::string_view name, std::string_view help,
                                    std::string_view type) {
  if (const auto it = index_.find(name); it != index_.end()) return families_[it->second];
  index_.emplace(std::string(name), families_.size());
  families_.push_back({std::string(name), std::string(help), std::string(type), {}});
  return families_.back();
}

std::string merge(const std::vector<std::string>& parts) {
  struct Merged {
    std::string head, lines;
  };
  std::vector<Merged> families;
  std::map<std::string, size_t, std::less<>> index;
  size_t total = 0;
  for (const std::string& part : parts) total += part.size();
  for (const std::string& part : parts) {
    Merged* current = nullptr;
    bool fresh = false;  // the current family was first seen in this part
    size_t at = 0;
    while (at < part.size()) {
      size_t end = part.find('\n', at);
      if (end == std::string::npos) end = part.size();
      const std::string_view line(part.data() + at, end - at);
      at = end + 1;
      if (line.empty()) continue;
      const bool help = line.starts_with("# HELP ");
      if (help || line.starts_with("# TYPE ")) {
        std::string_view name = line.substr(7);
        name = name.substr(0, name.find(' '));
        auto it = index.find(name);
        if (it == index.end()) {
          it = index.emplace(std::string(name), families.size()).first;
          families.emplace_back();
          fresh = true;
        } else if (help) {
          fresh = false;
        }
        current = &families[it->second];
        if (fresh) current->head.append(line).append("\n");
        continue;
      }
      if (line.front() == '#' || current == nullptr) continue;  // a comment
      current->lines.append(line).append("\n");
    }
  }
  std::string out;
  out.reserve(total);
  for (const Merged& f : families) out.append(f.head).append(f.lines);
  return out;
}

}  // namespace detwan::common::prometheus
