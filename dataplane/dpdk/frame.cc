// Names of the frame drop reasons and MAC parsing (setup and stats, not per packet).
#include <array>
#include <cctype>

#include "dataplane/dpdk/frame.h"

namespace detwan::dataplane::dpdk {

std::string_view to_string(FrameDrop reason) noexcept {
  static constexpr std::array<std::string_view, kFrameDropCount> kNames = {
      "none",         "other_mac",       "not_ip",        "bad_ip_header",
      "fragment",     "not_udp",         "wrong_address", "wrong_port",
      "bad_udp_length", "bad_checksum",  "multi_segment",
  };
  const auto i = static_cast<std::size_t>(reason);
  return i < kNames.size() ? kNames[i] : std::string_view("unknown");
}

bool parse_mac(std::string_view text, MacAddress* out) noexcept {
  // Exactly six two-digit hex groups separated by ':' or '-' (one separator kind).
  if (text.size() != 17) return false;
  const char separator = text[2];
  if (separator != ':' && separator != '-') return false;
  MacAddress mac;
  for (std::size_t i = 0; i < 6; ++i) {
    const std::size_t at = i * 3;
    if (i > 0 && text[at - 1] != separator) return false;
    uint8_t value = 0;
    for (std::size_t j = 0; j < 2; ++j) {
      const auto c = static_cast<unsigned char>(text[at + j]);
      if (std::isxdigit(c) == 0) return false;
      const int digit = std::isdigit(c) != 0 ? c - '0' : std::tolower(c) - 'a' + 10;
      value = static_cast<uint8_t>(value * 16 + digit);
    }
    mac.bytes[i] = value;
  }
  *out = mac;
  return true;
}

}  // namespace detwan::dataplane::dpdk
