#pragma once
// A valid gateway configuration with known line numbers, and helpers to change one line of it,
// shared by the config tests.
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "dataplane/gw/config.h"

namespace detwan::dataplane::gw::testing {

// wan1: IPv4, 1gbit, 100 slots of 10us, guard 1us, max frame 1518 bytes (12.144us at 1gbit):
//   n consecutive slots guarantee (n * 10us - 1us - 12.144us) * 1gbit / 1ms, so 100mbit needs 12
//   and 200mbit needs 22.
// wan2: IPv6, 10gbit, 100 slots of 10us, no guard: n slots guarantee (n * 10us - 1.215us) * 10,
//   so 1gbit needs 11.
inline constexpr std::string_view kBase =
    "gateway:\n"                                                         // 1
    "  name: site-a\n"                                                   // 2
    "tun:\n"                                                             // 3
    "  mtu: 1400\n"                                                      // 4
    "  routes: [10.20.1.0/24]\n"                                         // 5
    "wan_ports:\n"                                                       // 6
    "  - name: wan1\n"                                                   // 7
    "    local: 10.101.12.1:4789\n"                                      // 8
    "    line_rate: 1gbit\n"                                             // 9
    "    cycle: 1ms\n"                                                   // 10
    "    slots: 100\n"                                                   // 11
    "    guard: 1us\n"                                                   // 12
    "  - name: wan2\n"                                                   // 13
    "    local: \"[fd00::1]:4789\"\n"                                    // 14
    "    line_rate: 10gbit\n"                                            // 15
    "peers:\n"                                                           // 16
    "  - name: site-b\n"                                                 // 17
    "    wan_port: wan1\n"                                               // 18
    "    endpoint: 10.101.12.2:4789\n"                                   // 19
    "    min_path_delay: 2ms\n"                                          // 20
    "  - name: site-c\n"                                                 // 21
    "    wan_port: wan2\n"                                               // 22
    "    endpoint: \"[fd00::2]:4789\"\n"                                 // 23
    "tunnels:\n"                                                         // 24
    "  - id: 7\n"                                                        // 25
    "    peer: site-b\n"                                                 // 26
    "    rate: 100mbit\n"                                                // 27
    "    slots: 0-11\n"                                                  // 28
    "    bound: 5ms\n"                                                   // 29
    "    match: {dst: [10.20.2.0/24]}\n"                                 // 30
    "    auth: none\n"                                                   // 31
    "  - id: 9\n"                                                        // 32
    "    peer: site-b\n"                                                 // 33
    "    rate: 200mbit\n"                                                // 34
    "    slots: 20-41\n"                                                 // 35
    "    over_rate: best-effort\n"                                       // 36
    "    match: {dst: [10.20.3.0/24], udp_ports: [5201-5210, 9000]}\n"   // 37
    "    auth: none\n"                                                   // 38
    "  - id: 11\n"                                                       // 39
    "    peer: site-c\n"                                                 // 40
    "    rate: 1gbit\n"                                                  // 41
    "    slots: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"                    // 42
    "    service: {listen: 127.0.0.1:5000, deliver: 127.0.0.1:6000}\n"   // 43
    "    auth: none\n";                                                  // 44

// kBase with line `line` (1-based) replaced by `text` (which may hold several lines).
inline std::string replace_line(std::string_view base, int line, std::string_view text) {
  std::string out;
  int current = 1;
  size_t start = 0;
  while (start < base.size()) {
    size_t end = base.find('\n', start);
    if (end == std::string_view::npos) end = base.size();
    if (current == line) {
      out += text;
    } else {
      out += base.substr(start, end - start);
    }
    out += '\n';
    start = end + 1;
    ++current;
  }
  return out;
}

inline std::string with_line(int line, std::string_view text) {
  return replace_line(kBase, line, text);
}

// The error message of loading `yaml` as "gw.yaml"; fails the test if it loads.
inline std::string load_error(const std::string& yaml) {
  auto config = load_gateway_config_string(yaml, "gw.yaml");
  if (config) {
    ADD_FAILURE() << "expected an error, the config loaded:\n" << yaml;
    return "";
  }
  EXPECT_EQ(config.error().code, common::ErrorCode::kConfig) << config.error().message;
  return config.error().message;
}

inline GatewayConfig load_ok(const std::string& yaml) {
  auto config = load_gateway_config_string(yaml, "gw.yaml");
  if (!config) {
    ADD_FAILURE() << config.error().message << "\nin:\n" << yaml;
    return {};
  }
  return *config;
}

}  // namespace detwan::dataplane::gw::testing
