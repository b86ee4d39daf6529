#include "dataplane/wire/drop_reason.h"

namespace detwan::dataplane::wire {

std::string_view to_string(DropReason reason) noexcept {
  switch (reason) {
    case DropReason::kTooShort:
      return "too_short";
    case DropReason::kBadMagic:
      return "bad_magic";
    case DropReason::kBadVersion:
      return "bad_version";
    case DropReason::kReservedSet:
      return "reserved_set";
    case DropReason::kBadFlags:
      return "bad_flags";
    case DropReason::kBadType:
      return "bad_type";
    case DropReason::kBadTunnelId:
      return "bad_tunnel_id";
    case DropReason::kBadTimestamp:
      return "bad_timestamp";
    case DropReason::kOversize:
      return "oversize";
    case DropReason::kLengthMismatch:
      return "length_mismatch";
    case DropReason::kControlLength:
      return "control_length";
    case DropReason::kBadControl:
      return "bad_control";
    case DropReason::kDuplicate:
      return "duplicate";
    case DropReason::kTooOld:
      return "too_old";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

uint64_t DropCounters::total() const noexcept {
  uint64_t sum = 0;
  for (uint64_t n : by_reason) sum += n;
  return sum;
}

DropCounters& DropCounters::operator+=(const DropCounters& other) noexcept {
  for (std::size_t i = 0; i < kDropReasonCount; ++i) by_reason[i] += other.by_reason[i];
  return *this;
}

std::string to_json(const DropCounters& counters) {
  std::string out = "{";
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    if (i != 0) out += ',';
    out += '"';
    out += to_string(static_cast<DropReason>(i));
    out += "\":";
    out += std::to_string(counters.by_reason[i]);
  }
  out += '}';
  return out;
}

}  // namespace detwan::dataplane::wire
