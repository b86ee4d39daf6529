#include <string>

#include <fmt/format.h>

#include "tools/wanem/port.h"

namespace detwan::wanem {

std::string_view to_string(PortDrop drop) noexcept {
  switch (drop) {
    case PortDrop::kOversize:
      return "oversize";
    case PortDrop::kPoolEmpty:
      return "pool_empty";
    case PortDrop::kRxError:
      return "rx_error";
    case PortDrop::kRxKernel:
      return "rx_kernel";
    case PortDrop::kTxError:
      return "tx_error";
    case PortDrop::kTxBusy:
      return "tx_busy";
    case PortDrop::kNotDelivered:
      return "not_delivered";
    case PortDrop::kCloneFailed:
      return "clone_failed";
    case PortDrop::kCount:
      break;
  }
  return "unknown";
}

std::string port_counters_json(const PortCounters& counters) {
  std::string out = "{";
  uint64_t rx = 0;
  uint64_t tx = 0;
  for (int i = 0; i < kSideCount; ++i) {
    const SideCounters& s = counters.side[i];
    out += fmt::format(
        "\"{}\":{{\"rx_packets\":{},\"rx_bytes\":{},\"tx_packets\":{},\"tx_bytes\":{}}},",
        i == 0 ? "a" : "b", s.rx_packets, s.rx_bytes, s.tx_packets, s.tx_bytes);
    rx += s.rx_packets;
    tx += s.tx_packets;
  }
  out += fmt::format("\"rx\":{},\"tx\":{},\"rx_in_place\":{},\"rx_spilled\":{},\"drops\":{{", rx,
                     tx, counters.rx_in_place, counters.rx_spilled);
  for (int i = 0; i < static_cast<int>(PortDrop::kCount); ++i) {
    if (i != 0) out += ',';
    out += fmt::format("\"{}\":{}", to_string(static_cast<PortDrop>(i)), counters.drops[i]);
  }
  out += "}}";
  return out;
}

}  // namespace detwan::wanem
