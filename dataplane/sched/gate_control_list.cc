// Setup side of the gate control list: validation, window construction, printing.
#include "dataplane/sched/gate_control_list.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"

namespace detwan::dataplane::sched {
namespace {

using common::ErrorCode;
using common::make_error;

std::unexpected<common::Error> config_error(std::string message) {
  return make_error(ErrorCode::kConfig, "gate control list: " + std::move(message));
}

// A computed rate, readable and never lossy: "3.976gbit" or "3976123456bit".
std::string rate_text(uint64_t bps) {
  std::string exact = common::format_rate_bps(bps);
  if (exact.size() <= 12) return exact;
  return fmt::format("{:.6g}gbit", static_cast<double>(bps) / 1e9);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_u32(std::string_view s, uint32_t* out) {
  s = trim(s);
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

common::Result<GateControlList> GateControlList::create(GclConfig config) {
  if (config.cycle_ns <= 0) {
    return config_error(fmt::format("cycle_ns must be > 0 (got {})", config.cycle_ns));
  }
  if (config.slot_count == 0) return config_error("slot_count must be > 0");
  if (config.cycle_ns % config.slot_count != 0) {
    return config_error(fmt::format("cycle_ns {} is not a multiple of slot_count {}",
                                    config.cycle_ns, config.slot_count));
  }
  if (config.line_rate_bps == 0) return config_error("line_rate_bps must be > 0");
  if (config.max_frame_bytes == 0) return config_error("max_frame_bytes must be > 0");
  const int64_t slot_ns = config.cycle_ns / config.slot_count;
  if (config.guard_ns < 0) {
    return config_error(fmt::format("guard_ns must be >= 0 (got {})", config.guard_ns));
  }
  if (config.guard_ns >= slot_ns) {
    return config_error(fmt::format(
        "guard {} ({} ns) must be shorter than the slot length {} ({} ns = cycle {} / {} slots)",
        common::format_duration_ns(config.guard_ns), config.guard_ns,
        common::format_duration_ns(slot_ns), slot_ns, common::format_duration_ns(config.cycle_ns),
        config.slot_count));
  }

  GateControlList gcl;
  gcl.slot_ns_ = slot_ns;
  std::vector<const GclTunnel*> sorted;
  for (const GclTunnel& tunnel : config.tunnels) sorted.push_back(&tunnel);
  std::sort(sorted.begin(), sorted.end(),
            [](const GclTunnel* a, const GclTunnel* b) { return a->tunnel_id < b->tunnel_id; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->tunnel_id == sorted[i - 1]->tunnel_id) {
      return config_error(fmt::format("tunnel {} is listed twice", sorted[i]->tunnel_id));
    }
  }
  const auto tunnel_count = static_cast<OwnerIndex>(sorted.size());
  const OwnerIndex best_effort = tunnel_count;
  gcl.slot_owner_.assign(config.slot_count, best_effort);
  gcl.owners_.resize(sorted.size() + 1);
  Uint128 total_reserved = 0;
  for (OwnerIndex owner = 0; owner < tunnel_count; ++owner) {
    const GclTunnel& tunnel = *sorted[owner];
    gcl.tunnel_ids_.push_back(tunnel.tunnel_id);
    if (tunnel.reserved_rate_bps == 0) {
      return config_error(fmt::format("tunnel {}: reserved rate must be > 0", tunnel.tunnel_id));
    }
    gcl.owners_[owner].reserved_rate_bps = tunnel.reserved_rate_bps;
    total_reserved += tunnel.reserved_rate_bps;
    for (const uint32_t slot : tunnel.slots) {
      if (slot >= config.slot_count) {
        return config_error(fmt::format("tunnel {}: slot {} out of range [0, {})", tunnel.tunnel_id,
                                        slot, config.slot_count));
      }
      const OwnerIndex previous = gcl.slot_owner_[slot];
      if (previous == owner) {
        return config_error(
            fmt::format("tunnel {}: slot {} is listed twice", tunnel.tunnel_id, slot));
      }
      if (previous != best_effort) {
        return config_error(fmt::format("slot {} is claimed twice: by tunnel {} and tunnel {}",
                                        slot, gcl.tunnel_ids_[previous], tunnel.tunnel_id));
      }
      gcl.slot_owner_[slot] = owner;
      ++gcl.owners_[owner].owned_slots;
    }
  }
  for (const uint32_t owner : gcl.slot_owner_) {
    if (owner == best_effort) ++gcl.owners_[best_effort].owned_slots;
  }
  if (total_reserved > config.line_rate_bps) {
    std::string ids;
    for (const uint32_t id : gcl.tunnel_ids_) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    return config_error(fmt::format("total reserved rate {} (tunnels {}) exceeds the line rate {}",
                                    rate_text(static_cast<uint64_t>(total_reserved)), ids,
                                    rate_text(config.line_rate_bps)));
  }
  // Nominal capacity of a tunnel: owned / S * line rate.
  for (OwnerIndex owner = 0; owner < tunnel_count; ++owner) {
    const Owner& o = gcl.owners_[owner];
    if (static_cast<Uint128>(o.reserved_rate_bps) * config.slot_count >
        static_cast<Uint128>(o.owned_slots) * config.line_rate_bps) {
      const auto nominal = static_cast<uint64_t>(static_cast<Uint128>(o.owned_slots) *
                                                 config.line_rate_bps / config.slot_count);
      return config_error(fmt::format(
          "tunnel {}: its {} of {} slots carry {} at line rate {}, less than its reserved rate {}",
          gcl.tunnel_ids_[owner], o.owned_slots, config.slot_count, rate_text(nominal),
          rate_text(config.line_rate_bps), rate_text(o.reserved_rate_bps)));
    }
  }

  // Windows: maximal runs of one owner around the circle of slots. (No % in these loops: a
  // division per slot made this the largest cost of a run-time change on a 1000-slot port.)
  const uint32_t s_count = config.slot_count;
  const std::vector<OwnerIndex>& slot_owner = gcl.slot_owner_;
  uint32_t first = 0;  // a slot where a run starts (owner differs from the slot before it)
  while (first < s_count && slot_owner[first] == slot_owner[first == 0 ? s_count - 1 : first - 1]) {
    ++first;
  }
  if (first == s_count) {
    gcl.owners_[slot_owner[0]].always_open = true;  // one owner holds every slot
  } else {
    uint32_t i = 0;
    uint32_t slot = first;  // (first + i) mod s_count
    while (i < s_count) {
      const uint32_t start = slot;
      const OwnerIndex owner = slot_owner[start];
      uint32_t length = 0;
      while (i < s_count && slot_owner[slot] == owner) {
        ++length;
        ++i;
        slot = slot + 1 == s_count ? 0 : slot + 1;
      }
      gcl.owners_[owner].windows.push_back(CycleWindow{static_cast<int64_t>(start) * slot_ns,
                                                       static_cast<int64_t>(length) * slot_ns});
    }
    for (Owner& owner : gcl.owners_) {
      std::sort(owner.windows.begin(), owner.windows.end(),
                [](const CycleWindow& a, const CycleWindow& b) {
                  return a.start_offset_ns < b.start_offset_ns;
                });
    }
  }
  gcl.config_ = std::move(config);

  // What a tunnel can carry after guard bands and per-window packing of max-size frames.
  for (OwnerIndex owner = 0; owner < tunnel_count; ++owner) {
    const uint64_t guaranteed = gcl.guaranteed_rate_bps(owner);
    if (gcl.owners_[owner].reserved_rate_bps > guaranteed) {
      return config_error(fmt::format(
          "tunnel {}: reserved rate {} exceeds the {} its slots guarantee after guard bands "
          "({} per window) and packing of {}-byte frames (nominal {} of {} slots = {})",
          gcl.tunnel_ids_[owner], rate_text(gcl.owners_[owner].reserved_rate_bps),
          rate_text(guaranteed), common::format_duration_ns(gcl.config_.guard_ns),
          gcl.config_.max_frame_bytes, gcl.owners_[owner].owned_slots, s_count,
          rate_text(static_cast<uint64_t>(static_cast<Uint128>(gcl.owners_[owner].owned_slots) *
                                          gcl.config_.line_rate_bps / s_count))));
    }
  }
  return gcl;
}

uint64_t GateControlList::reserved_rate_bps(OwnerIndex owner) const noexcept {
  return owner < owners_.size() ? owners_[owner].reserved_rate_bps : 0;
}

uint32_t GateControlList::owned_slot_count(OwnerIndex owner) const noexcept {
  return owner < owners_.size() ? owners_[owner].owned_slots : 0;
}

uint64_t GateControlList::guaranteed_rate_bps(OwnerIndex owner) const noexcept {
  if (owner >= owners_.size()) return 0;
  const Owner& o = owners_[owner];
  if (o.always_open) return config_.line_rate_bps;
  const int64_t max_frame_ns =
      ceil_serialisation_ns(uint64_t{config_.max_frame_bytes} * 8, config_.line_rate_bps);
  Uint128 usable_ns = 0;
  for (const CycleWindow& w : o.windows) {
    const int64_t usable = w.length_ns - config_.guard_ns - max_frame_ns;
    if (usable > 0) usable_ns += static_cast<uint64_t>(usable);
  }
  return static_cast<uint64_t>(usable_ns * config_.line_rate_bps /
                               static_cast<uint64_t>(config_.cycle_ns));
}

std::string GateControlList::describe() const {
  std::string out = fmt::format(
      "cycle {} = {} slots of {}, base {} ns, guard {}, line rate {}, max frame {} bytes\n",
      common::format_duration_ns(config_.cycle_ns), config_.slot_count,
      common::format_duration_ns(slot_ns_), config_.base_time_ns,
      common::format_duration_ns(config_.guard_ns), rate_text(config_.line_rate_bps),
      config_.max_frame_bytes);
  for (OwnerIndex owner = 0; owner < owners_.size(); ++owner) {
    std::vector<uint32_t> slots;
    for (uint32_t s = 0; s < config_.slot_count; ++s) {
      if (slot_owner_[s] == owner) slots.push_back(s);
    }
    const std::string name = owner == best_effort_owner()
                                 ? std::string("best effort")
                                 : fmt::format("tunnel {}", tunnel_ids_[owner]);
    out += fmt::format("{}: slots {} ({}/{}), ", name,
                       slots.empty() ? std::string("none") : format_slot_list(slots),
                       owners_[owner].owned_slots, config_.slot_count);
    if (owner != best_effort_owner()) {
      out += fmt::format("reserved {}, ", rate_text(owners_[owner].reserved_rate_bps));
    }
    out += fmt::format("guaranteed {}\n", rate_text(guaranteed_rate_bps(owner)));
  }
  return out;
}

common::Result<std::vector<uint32_t>> parse_slot_list(std::string_view text, uint32_t slot_count) {
  std::vector<uint32_t> slots;
  text = trim(text);
  if (text.empty()) return slots;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view token = trim(text.substr(0, comma));
    const size_t dash = token.find('-');
    uint32_t first = 0;
    uint32_t last = 0;
    const bool ok =
        dash == std::string_view::npos
            ? parse_u32(token, &first) && (last = first, true)
            : parse_u32(token.substr(0, dash), &first) && parse_u32(token.substr(dash + 1), &last);
    if (!ok) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("'{}': expected a slot number or a range like '0-39'", token));
    }
    if (last < first) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("'{}': range ends before it starts", token));
    }
    if (last >= slot_count) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("'{}': slot {} out of range [0, {})", token, last, slot_count));
    }
    for (uint32_t s = first; s <= last; ++s) slots.push_back(s);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return slots;
}

std::string format_slot_list(std::vector<uint32_t> slots) {
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  std::string out;
  for (size_t i = 0; i < slots.size();) {
    size_t j = i;
    while (j + 1 < slots.size() && slots[j + 1] == slots[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", slots[i]) : fmt::format("{}-{}", slots[i], slots[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace detwan::dataplane::sched
