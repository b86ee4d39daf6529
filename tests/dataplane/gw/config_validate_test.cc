// Validation rules of the gateway configuration: each error names file:line:col and the field
// path, and says what is wrong. The base config is in config_test_util.h (line numbers there).
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dataplane/gw/config.h"
#include "tests/dataplane/gw/config_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::kBase;
using testing::load_error;
using testing::load_ok;
using testing::replace_line;
using ::testing::StartsWith;
using testing::with_line;

TEST(ConfigValidate, BaseConfigIsValid) { load_ok(std::string(kBase)); }

// ---- required keys, unknown keys, ranges, syntax ----

TEST(ConfigValidate, MissingRequiredKeys) {
  EXPECT_EQ(load_error(with_line(2, "  cpu: 1")),
            "gw.yaml:2:3: field 'gateway.name': missing required field");
  EXPECT_EQ(load_error(with_line(9, "    mtu: 1500")),
            "gw.yaml:7:5: field 'wan_ports[0].line_rate': missing required field");
  EXPECT_EQ(load_error(with_line(27, "    dscp: 1")),
            "gw.yaml:25:5: field 'tunnels[0].rate': missing required field");
  EXPECT_EQ(load_error("gateway: {name: a}\n"),
            "gw.yaml:1:1: field 'wan_ports': missing required field");
  EXPECT_THAT(load_error("gateway: {name: a}\nwan_ports: []\n"),
              HasSubstr("field 'wan_ports': at least one WAN port is required"));
}

TEST(ConfigValidate, UnknownKeysAreNamed) {
  EXPECT_THAT(load_error(with_line(27, "    rat: 100mbit")),
              AllOf(StartsWith("gw.yaml:27:5: field 'tunnels[0].rat': unknown key 'rat' (allowed: "
                               "id, peer, owner, rate, slots,"),
                    HasSubstr("service, protection, auth)")));
  EXPECT_THAT(load_error(with_line(1, "gateways:")),
              StartsWith("gw.yaml:1:1: field 'gateways': unknown key 'gateways'"));
}

TEST(ConfigValidate, NumbersOutOfRange) {
  EXPECT_EQ(load_error(with_line(29, "    dscp: 64")),
            "gw.yaml:29:11: field 'tunnels[0].dscp': expected an integer in [0, 63], got '64'");
  EXPECT_EQ(load_error(with_line(11, "    mtu: 9217")),
            "gw.yaml:11:10: field 'wan_ports[0].mtu': expected an integer in [576, 9216], got "
            "'9217'");
  EXPECT_EQ(load_error(with_line(25, "  - id: 0")),
            "gw.yaml:25:9: field 'tunnels[0].id': expected an integer in [1, 4294967295], got "
            "'0'");
  EXPECT_EQ(load_error(with_line(25, "  - id: 4294967296")),
            "gw.yaml:25:9: field 'tunnels[0].id': expected an integer in [1, 4294967295], got "
            "'4294967296'");
  EXPECT_EQ(load_error(with_line(10, "    cycle: 20s")),
            "gw.yaml:10:12: field 'wan_ports[0].cycle': 20s is out of range [1us, 10s]");
  EXPECT_THAT(
      load_error(with_line(9, "    line_rate: 1gbt")),
      StartsWith("gw.yaml:9:16: field 'wan_ports[0].line_rate': '1gbt': unknown rate unit"));
}

TEST(ConfigValidate, NegativeDurationsOnlyForTheClockOffset) {
  EXPECT_EQ(load_error(with_line(29, "    bound: -1ms")),
            "gw.yaml:29:12: field 'tunnels[0].bound': '-1ms': negative duration not allowed");
  EXPECT_THAT(load_error(with_line(20, "    min_path_delay: -2ms")),
              StartsWith("gw.yaml:20:21: field 'peers[0].min_path_delay': '-2ms': negative"));
}

TEST(ConfigValidate, EnumsListTheirValues) {
  EXPECT_EQ(load_error(with_line(2, "  name: site-a\n  backend: xdp")),
            "gw.yaml:3:12: field 'gateway.backend': 'xdp' is not one of: uring, dpdk");
  EXPECT_EQ(load_error(with_line(36, "    over_rate: downgrade")),
            "gw.yaml:36:16: field 'tunnels[1].over_rate': 'downgrade' is not one of: drop, "
            "best-effort");
  EXPECT_EQ(load_error(with_line(29, "    late: hold")),
            "gw.yaml:29:11: field 'tunnels[0].late': 'hold' is not one of: deliver, drop");
}

TEST(ConfigValidate, NamesMustBePlain) {
  EXPECT_THAT(load_error(with_line(7, "  - name: wan 1")),
              StartsWith("gw.yaml:7:11: field 'wan_ports[0].name': 'wan 1' is not a valid name"));
  EXPECT_THAT(load_error(with_line(4, "  mtu: 1400\n  name: this-name-is-too-long")),
              StartsWith("gw.yaml:5:9: field 'tun.name': 'this-name-is-too-long' is not a valid "
                         "interface name"));
}

TEST(ConfigValidate, UnquotedIpv6EndpointGetsAHint) {
  EXPECT_THAT(load_error(with_line(14, "    local: [fd00::1]")),
              AllOf(StartsWith("gw.yaml:14:12: field 'wan_ports[1].local': expected an endpoint"),
                    HasSubstr("quote IPv6 endpoints")));
}

// ---- names and references ----

TEST(ConfigValidate, DuplicateNamesAndIds) {
  EXPECT_EQ(load_error(with_line(13, "  - name: wan1")),
            "gw.yaml:13:11: field 'wan_ports[1].name': duplicate WAN port name 'wan1' (also "
            "wan_ports[0])");
  EXPECT_EQ(load_error(with_line(21, "  - name: site-b")),
            "gw.yaml:21:11: field 'peers[1].name': duplicate peer name 'site-b' (also peers[0])");
  EXPECT_EQ(load_error(with_line(32, "  - id: 7")),
            "gw.yaml:32:9: field 'tunnels[1].id': duplicate tunnel id 7 (also tunnels[0])");
}

TEST(ConfigValidate, UnknownReferences) {
  EXPECT_EQ(load_error(with_line(26, "    peer: site-x")),
            "gw.yaml:26:11: field 'tunnels[0].peer': unknown peer 'site-x' (peers: site-b, "
            "site-c)");
  EXPECT_EQ(load_error(with_line(18, "    wan_port: wan3")),
            "gw.yaml:18:15: field 'peers[0].wan_port': unknown WAN port 'wan3' (WAN ports: wan1, "
            "wan2)");
}

// ---- addresses ----

TEST(ConfigValidate, PeerEndpointMustMatchThePortsIpVersion) {
  EXPECT_EQ(load_error(with_line(23, "    endpoint: 10.9.9.9:4789")),
            "gw.yaml:23:15: field 'peers[1].endpoint': 10.9.9.9:4789 is IPv4, but WAN port "
            "'wan2' is IPv6 (local [fd00::1]:4789)");
}

TEST(ConfigValidate, PeerEndpointsAreUsableAndDistinct) {
  EXPECT_EQ(load_error(with_line(19, "    endpoint: 10.101.12.2:0")),
            "gw.yaml:19:15: field 'peers[0].endpoint': the peer's UDP port must not be 0");
  EXPECT_THAT(load_error(with_line(19, "    endpoint: 0.0.0.0:4789")),
              HasSubstr("field 'peers[0].endpoint': '0.0.0.0:4789': the peer's address must not"));
  const std::string same =
      replace_line(with_line(23, "    endpoint: 10.101.12.2:4789"), 22, "    wan_port: wan1");
  EXPECT_EQ(load_error(same),
            "gw.yaml:23:15: field 'peers[1].endpoint': 10.101.12.2:4789 on WAN port 'wan1' is "
            "also the endpoint of peer 'site-b'");
}

TEST(ConfigValidate, PrefixesWithHostBitsAreErrors) {
  EXPECT_EQ(load_error(with_line(30, "    match: {dst: [10.20.2.1/24]}")),
            "gw.yaml:30:19: field 'tunnels[0].match.dst[0]': '10.20.2.1/24': host bits are set "
            "(the network is 10.20.2.0/24)");
  EXPECT_EQ(load_error(with_line(5, "  routes: [10.20.1.1/24]")),
            "gw.yaml:5:12: field 'tun.routes[0]': '10.20.1.1/24': host bits are set (the network "
            "is 10.20.1.0/24)");
  EXPECT_THAT(load_error(with_line(5, "  routes: [10.20.1.0/24, 10.20.1.0/24]")),
              HasSubstr("field 'tun.routes[1]': 10.20.1.0/24 is listed twice"));
}

TEST(ConfigValidate, DuplicateLocalEndpoints) {
  EXPECT_EQ(load_error(with_line(43, "    service: {listen: 10.101.12.1:4789}")),
            "gw.yaml:43:23: field 'tunnels[2].service.listen': 10.101.12.1:4789 is the local "
            "endpoint of WAN port 'wan1'");
  EXPECT_THAT(load_error(with_line(14, "    local: 10.101.12.1:4789")),
              HasSubstr("field 'wan_ports[1].local': 10.101.12.1:4789 is also the local endpoint "
                        "of WAN port 'wan1'"));
}

// ---- MTUs ----

TEST(ConfigValidate, TunMtuMustLeaveRoomForTheEncapsulation) {
  EXPECT_EQ(load_error(with_line(4, "  mtu: 1440")),
            "gw.yaml:4:8: field 'tun.mtu': tun.mtu 1440 + 68 bytes of IPv4 encapsulation = 1508 "
            "exceeds the mtu 1500 of WAN port 'wan1' (wan_ports[0].mtu); use tun.mtu <= 1432");
  EXPECT_THAT(load_error(with_line(4, "  mtu: 1420")),
              HasSubstr("tun.mtu 1420 + 88 bytes of IPv6 encapsulation = 1508 exceeds the mtu "
                        "1500 of WAN port 'wan2' (wan_ports[1].mtu); use tun.mtu <= 1412"));
  load_ok(with_line(4, "  mtu: 1412"));
}

TEST(ConfigValidate, Ipv6NeedsItsMinimumMtu) {
  EXPECT_EQ(load_error(with_line(15, "    line_rate: 10gbit\n    mtu: 1200")),
            "gw.yaml:16:10: field 'wan_ports[1].mtu': mtu 1200 is below IPv6's minimum link MTU "
            "1280 (local [fd00::1]:4789 is IPv6)");
  EXPECT_THAT(
      load_error(replace_line(with_line(5, "  routes: [\"fd00:20::/64\"]"), 4, "  mtu: 1000")),
      StartsWith("gw.yaml:4:8: field 'tun.mtu': tun.mtu 1000 is below IPv6's minimum link "
                 "MTU 1280, but tun.routes has IPv6 prefixes"));
}

TEST(ConfigValidate, TunDisabledLeavesNoRoutesOrMatches) {
  EXPECT_THAT(load_error(with_line(4, "  enabled: false")),
              StartsWith("gw.yaml:5:11: field 'tun.routes': routes need the TUN interface"));
  EXPECT_THAT(load_error(replace_line(with_line(5, "  routes: []"), 4, "  enabled: false")),
              StartsWith("gw.yaml:30:18: field 'tunnels[0].match.dst': match classifies traffic "
                         "from the TUN interface, which is disabled"));
}

// ---- the slot schedule ----

TEST(ConfigValidate, GuardMustBeShorterThanASlot) {
  EXPECT_EQ(load_error(with_line(12, "    guard: 10us")),
            "gw.yaml:12:12: field 'wan_ports[0].guard': guard 10us must be shorter than the slot "
            "length 10us (cycle 1ms / 100 slots)");
}

TEST(ConfigValidate, CycleMustBeAMultipleOfTheSlotCount) {
  EXPECT_EQ(load_error(with_line(11, "    slots: 300")),
            "gw.yaml:10:12: field 'wan_ports[0].cycle': cycle 1ms (1000000 ns) is not a multiple "
            "of the 300 slots: the slot length must be a whole number of ns");
}

TEST(ConfigValidate, SlotOutOfRange) {
  EXPECT_EQ(load_error(with_line(28, "    slots: 95-100")),
            "gw.yaml:28:12: field 'tunnels[0].slots': slot 100 out of range [0, 100) of WAN port "
            "'wan1'");
  EXPECT_THAT(load_error(with_line(28, "    slots: 0-70000")),
              StartsWith("gw.yaml:28:12: field 'tunnels[0].slots': '0-70000': slot 70000 out of "
                         "range"));
  EXPECT_THAT(load_error(with_line(42, "    slots: [0, 1, x]")),
              StartsWith("gw.yaml:42:19: field 'tunnels[2].slots[2]': expected an integer"));
}

TEST(ConfigValidate, SlotClaimedByTwoTunnelsNamesBoth) {
  EXPECT_EQ(load_error(with_line(35, "    slots: 11-32")),
            "gw.yaml:35:12: field 'tunnels[1].slots': slot 11 of WAN port 'wan1' is claimed by "
            "two tunnels: tunnel 7 (tunnels[0]) and tunnel 9 (tunnels[1])");
  EXPECT_EQ(load_error(with_line(28, "    slots: 0-11,5")),
            "gw.yaml:28:12: field 'tunnels[0].slots': slot 5 is listed twice");
}

TEST(ConfigValidate, ReservedRatesAboveTheLineRate) {
  EXPECT_EQ(load_error(with_line(34, "    rate: 950mbit")),
            "gw.yaml:34:11: field 'tunnels[1].rate': the reserved rates on WAN port 'wan1' add "
            "up to 1.05gbit (tunnels 7, 9), above its line rate 1gbit");
}

TEST(ConfigValidate, SlotsThatCannotCarryTheRateSuggestHowMany) {
  EXPECT_THAT(load_error(with_line(28, "    slots: 0-10")),
              AllOf(StartsWith("gw.yaml:28:12: field 'tunnels[0].slots': tunnel 7: reserved rate "
                               "100mbit exceeds the 96.856mbit its slots guarantee"),
                    HasSubstr("; on WAN port 'wan1' (slot 10us, line rate 1gbit) it needs at "
                              "least 12 consecutive slots")));
  EXPECT_THAT(load_error(with_line(28, "    slots: \"\"")),
              AllOf(HasSubstr("tunnel 7: its 0 of 100 slots carry 0bit"),
                    HasSubstr("it needs at least 12 consecutive slots")));
  EXPECT_THAT(load_error(with_line(35, "    slots: 20-40")),
              HasSubstr("field 'tunnels[1].slots': tunnel 9: reserved rate 200mbit exceeds"));
}

TEST(ConfigValidate, FragmentedSlotsLoseAGuardAndAFramePerWindow) {
  EXPECT_THAT(load_error(with_line(28, "    slots: 0-5,50-55")),
              AllOf(HasSubstr("field 'tunnels[0].slots': tunnel 7: reserved rate 100mbit exceeds "
                              "the 93.712mbit"),
                    HasSubstr("needs at least 12 consecutive slots (its 12 slots form 2 windows")));
  // Across the cycle boundary 94-99 and 0-5 are one window of 12 slots.
  load_ok(with_line(28, "    slots: 94-99,0-5"));
}

TEST(ConfigValidate, DowngradeNeedsUnreservedSlots) {
  EXPECT_EQ(load_error(with_line(35, "    slots: 12-99")),
            "gw.yaml:36:16: field 'tunnels[1].over_rate': over_rate best-effort needs unreserved "
            "slots, but every slot of WAN port 'wan1' is owned by a tunnel");
}

TEST(ConfigValidate, TimingWheelLimitIsMappedToMaxWait) {
  const std::string yaml =
      "gateway: {name: a}\n"
      "wan_ports: [{name: w, local: 10.0.0.1:1, line_rate: 1gbit, cycle: 1us, slots: 8}]\n"
      "peers: [{name: p, wan_port: w, endpoint: 10.0.0.2:1}]\n"
      "tunnels:\n"
      "  - {id: 1, peer: p, rate: 1mbit, slots: 0-7, max_wait: 1s, auth: none}\n";
  EXPECT_THAT(load_error(yaml),
              AllOf(StartsWith("gw.yaml:5:57: field 'tunnels[0].max_wait': tx scheduler: the "
                               "timing wheel would need"),
                    HasSubstr("buckets")));
  load_ok(
      replace_line(yaml, 5, "  - {id: 1, peer: p, rate: 1mbit, slots: 0-7, max_wait: 1ms, auth: none}"));
}

// ---- tunnel policies ----

TEST(ConfigValidate, BoundBelowThePathDelay) {
  EXPECT_EQ(load_error(with_line(29, "    bound: 1ms")),
            "gw.yaml:29:12: field 'tunnels[0].bound': bound 1ms is below the path's propagation "
            "delay 2ms (peers[0].min_path_delay of peer 'site-b'): every packet would be late");
  load_ok(with_line(29, "    bound: 2ms"));
  load_ok(with_line(29, "    bound: 0"));  // 0 = deliver on receipt
}

TEST(ConfigValidate, MaxHoldShorterThanBound) {
  // max_hold not written (1s): the error points at the tunnel.
  EXPECT_EQ(load_error(with_line(29, "    bound: 2s")),
            "gw.yaml:25:5: field 'tunnels[0].max_hold': max_hold 1s is shorter than bound 2s: "
            "on-time packets would be dropped as too early");
  EXPECT_THAT(load_error(with_line(29, "    bound: 5ms\n    max_hold: 4ms")),
              StartsWith("gw.yaml:30:15: field 'tunnels[0].max_hold': max_hold 4ms is shorter "
                         "than bound 5ms"));
}

TEST(ConfigValidate, ReplayWindowMustBeAPowerOfTwo) {
  EXPECT_EQ(load_error(with_line(29, "    replay_window: 1000")),
            "gw.yaml:29:20: field 'tunnels[0].replay_window': replay window of 1000 bits: must "
            "be a power of two in [64, 65536]");
  EXPECT_THAT(load_error(with_line(29, "    replay_window: 131072")),
              HasSubstr("replay window of 131072 bits"));
  EXPECT_EQ(load_ok(with_line(29, "    replay_window: 64")).tunnels[0].replay_window_bits, 64u);
}

TEST(ConfigValidate, ShaperBurstAndQueue) {
  EXPECT_EQ(load_error(with_line(29, "    shaper_rate: 50mbit")),
            "gw.yaml:29:18: field 'tunnels[0].shaper_rate': shaper_rate 50mbit is below the "
            "tunnel's rate 100mbit: traffic the policer admits could never leave (it would "
            "fill the queue and be dropped)");
  EXPECT_EQ(load_error(with_line(29, "    burst: 1kb")),
            "gw.yaml:29:12: field 'tunnels[0].burst': burst 1kb is smaller than one frame of WAN "
            "port 'wan1' (1518 bytes = mtu 1500 + 18): no full-size frame would ever conform");
  EXPECT_THAT(load_error(with_line(29, "    burst: 0")),
              StartsWith("gw.yaml:29:12: field 'tunnels[0].burst': 0 is out of range"));
  EXPECT_EQ(load_ok(with_line(29, "    shaper_rate: 0bit")).tunnels[0].shaper_rate_bps, 0u);
  EXPECT_THAT(load_error(with_line(29, "    queue: 0")),
              StartsWith("gw.yaml:29:12: field 'tunnels[0].queue': expected an integer in [1,"));
}

TEST(ConfigValidate, PeerTimers) {
  EXPECT_EQ(load_error(with_line(20, "    dead_after: 100ms")),
            "gw.yaml:20:17: field 'peers[0].dead_after': dead_after 100ms must be longer than "
            "keepalive_interval 100ms, or the peer is declared down between two keepalives");
  EXPECT_THAT(load_error(with_line(20, "    keepalive_interval: 0")),
              StartsWith("gw.yaml:20:25: field 'peers[0].keepalive_interval': 0 is out of range "
                         "[1ms, "));
}

TEST(ConfigValidate, GatewaySection) {
  EXPECT_EQ(load_error(with_line(2, "  name: site-a\n  buffers: 64\n  batch: 128")),
            "gw.yaml:4:10: field 'gateway.batch': batch 128 is larger than gateway.buffers 64");
  EXPECT_THAT(load_error(with_line(2, "  name: site-a\n  control_socket: \"@\"")),
              StartsWith("gw.yaml:3:19: field 'gateway.control_socket': an abstract socket needs "
                         "a name"));
  EXPECT_THAT(load_error(with_line(2, "  name: site-a\n  cpu: 1024")),
              StartsWith("gw.yaml:3:8: field 'gateway.cpu': expected an integer in [-1, 1023]"));
}

// ---- classifiers and services ----

TEST(ConfigValidate, OverlappingMatchesNeedDisjointUdpPorts) {
  EXPECT_EQ(load_error(with_line(30, "    match: {dst: [10.20.0.0/16]}")),
            "gw.yaml:37:19: field 'tunnels[1].match.dst[0]': 10.20.3.0/24 of tunnel 9 overlaps "
            "10.20.0.0/16 of tunnel 7 (tunnels[0].match.dst[0]) and tunnel 7 has no udp_ports "
            "(it matches every packet to the prefix); tunnel 9 has no match.src (any source): a "
            "packet could match both; give them disjoint udp_ports or disjoint match.src");
  EXPECT_THAT(load_error(with_line(30, "    match: {dst: [10.20.3.0/24], udp_ports: [5210-5300]}")),
              HasSubstr("10.20.3.0/24 of tunnel 9 overlaps 10.20.3.0/24 of tunnel 7 "
                        "(tunnels[0].match.dst[0]) and their UDP ports 5201-5210 and 5210-5300 "
                        "overlap"));
  const GatewayConfig disjoint =
      load_ok(with_line(30, "    match: {dst: [10.20.0.0/16], udp_ports: [5000-5200, 5211]}"));
  EXPECT_EQ(disjoint.tunnels[0].udp_ports.size(), 2u);
}

// A tunnel carries only its tenant: match.src, and what to do with the others (foreign_source).
TEST(ConfigValidate, MatchSourcesNameTheTenant) {
  const GatewayConfig c =
      load_ok(with_line(30,
                        "    match: {dst: [10.20.2.0/24, \"fd20:2::/64\"], src: [10.20.1.5/32, "
                        "10.20.1.128/25, \"fd20:1::5/128\"]}\n    foreign_source: best-effort"));
  ASSERT_EQ(c.tunnels[0].src_prefixes.size(), 3u);
  EXPECT_EQ(format_prefix(c.tunnels[0].src_prefixes[1]), "10.20.1.128/25");
  EXPECT_TRUE(c.tunnels[0].src_prefixes[2].ipv6);
  EXPECT_EQ(c.tunnels[0].foreign_source, ForeignSource::kBestEffort);
  EXPECT_TRUE(c.tunnels[1].src_prefixes.empty());                // any source
  EXPECT_EQ(c.tunnels[1].foreign_source, ForeignSource::kDrop);  // the default
  // Errors name the field.
  EXPECT_THAT(load_error(with_line(30, "    match: {src: [10.20.1.5/32]}")),
              HasSubstr("field 'tunnels[0].match.src': src narrows match.dst, which is empty"));
  EXPECT_THAT(load_error(with_line(30, "    match: {dst: [10.20.2.0/24], src: [10.20.1.5/24]}")),
              HasSubstr("field 'tunnels[0].match.src[0]': '10.20.1.5/24': host bits are set"));
  EXPECT_THAT(load_error(with_line(30,
                                   "    match: {dst: [10.20.2.0/24], src: [10.20.1.5/32, "
                                   "10.20.1.5/32]}")),
              HasSubstr("field 'tunnels[0].match.src[1]'"));
  EXPECT_THAT(load_error(with_line(30, "    match: {dst: [10.20.2.0/24], src: [\"fd20:1::/64\"]}")),
              HasSubstr("field 'tunnels[0].match.src': match.dst has IPv4 prefixes but match.src "
                        "has none: every IPv4 packet would be foreign"));
  EXPECT_THAT(
      load_error(with_line(30,
                           "    match: {dst: [10.20.2.0/24], src: [10.20.1.0/24, "
                           "\"fd20:1::/64\"]}")),
      HasSubstr("field 'tunnels[0].match.src': match.src has IPv6 prefixes but match.dst has "
                "none: they would never match"));
  EXPECT_THAT(load_error(with_line(30,
                                   "    match: {dst: [10.20.2.0/24]}\n    foreign_source: "
                                   "forward")),
              HasSubstr("field 'tunnels[0].foreign_source': 'forward' is not one of: drop, "
                        "best-effort"));
  // Best effort needs unreserved slots on the port, as over_rate best-effort does.
  EXPECT_THAT(load_error(replace_line(with_line(35, "    slots: 12-99"), 36,
                                      "    foreign_source: best-effort")),
              HasSubstr("field 'tunnels[1].foreign_source': foreign_source best-effort needs "
                        "unreserved slots"));
}

TEST(ConfigValidate, TwoTenantsMayShareADestinationWithDisjointSources) {
  // Tunnel 9 to tunnel 7's prefix, from other hosts: each packet still matches one tunnel.
  const std::string two =
      replace_line(with_line(30, "    match: {dst: [10.20.2.0/24], src: [10.20.1.0/25]}"), 37,
                   "    match: {dst: [10.20.2.0/24], src: [10.20.1.128/25]}");
  const GatewayConfig c = load_ok(two);
  ASSERT_EQ(c.tunnels.size(), 3u);
  EXPECT_EQ(c.tunnels[1].dst_prefixes, c.tunnels[0].dst_prefixes);
  // Overlapping sources (or one without match.src: any source) cannot be told apart.
  EXPECT_THAT(
      load_error(replace_line(two, 37, "    match: {dst: [10.20.2.0/24], src: [10.20.1.0/24]}")),
      HasSubstr("their sources 10.20.1.0/24 and 10.20.1.0/25 overlap: a packet could match "
                "both; give them disjoint udp_ports or disjoint match.src"));
  EXPECT_THAT(load_error(replace_line(two, 37, "    match: {dst: [10.20.2.0/24]}")),
              HasSubstr("tunnel 9 has no match.src (any source)"));
}

TEST(ConfigValidate, UdpPortLists) {
  EXPECT_EQ(
      load_error(with_line(37, "    match: {dst: [10.20.3.0/24], udp_ports: [5201-5210, 5205]}")),
      "gw.yaml:37:57: field 'tunnels[1].match.udp_ports[1]': UDP ports 5205 overlap "
      "5201-5210 listed before");
  EXPECT_THAT(load_error(with_line(37, "    match: {dst: [10.20.3.0/24], udp_ports: [0]}")),
              HasSubstr("field 'tunnels[1].match.udp_ports[0]': '0': expected a UDP port in [1, "
                        "65535]"));
  EXPECT_THAT(load_error(with_line(37, "    match: {dst: [10.20.3.0/24], udp_ports: [20-10]}")),
              HasSubstr("'20-10': range ends before it starts"));
  EXPECT_THAT(load_error(with_line(37, "    match: {udp_ports: [9000]}")),
              HasSubstr("field 'tunnels[1].match.udp_ports': udp_ports narrows match.dst, which is "
                        "empty"));
}

TEST(ConfigValidate, ServiceSidesAreOptionalButNotBothAbsent) {
  const GatewayConfig listen_only = load_ok(with_line(43, "    service: {listen: 127.0.0.1:5000}"));
  EXPECT_TRUE(listen_only.tunnels[2].service_listen);
  EXPECT_FALSE(listen_only.tunnels[2].service_deliver);
  const GatewayConfig deliver_only =
      load_ok(with_line(43, "    service: {deliver: \"[::1]:6000\"}"));
  EXPECT_FALSE(deliver_only.tunnels[2].service_listen);
  EXPECT_TRUE(deliver_only.tunnels[2].service_deliver->ipv6);
  EXPECT_EQ(load_error(with_line(43, "    service: {}")),
            "gw.yaml:43:14: field 'tunnels[2].service': a service needs 'listen' (send side), "
            "'deliver' (receive side) or both");
  EXPECT_EQ(load_error(with_line(43, "    service: {deliver: 127.0.0.1:0}")),
            "gw.yaml:43:24: field 'tunnels[2].service.deliver': the delivery UDP port must not "
            "be 0");
}

// ---- backend dpdk ----

TEST(ConfigValidate, DpdkBackendNeedsEalAndPortSections) {
  const std::string dpdk = with_line(2, "  name: site-a\n  backend: dpdk");  // +1 line
  EXPECT_THAT(load_error(dpdk),
              StartsWith("gw.yaml:1:1: field 'dpdk.eal': backend dpdk needs the EAL arguments"));
  const std::string with_eal =
      replace_line(dpdk, 6, "  routes: [10.20.1.0/24]\ndpdk: {eal: [--no-huge]}");  // +1 line
  EXPECT_EQ(load_error(with_eal),
            "gw.yaml:9:5: field 'wan_ports[0].dpdk': backend dpdk needs a dpdk section (device, "
            "next_hop_mac) on WAN port 'wan1'");
}

TEST(ConfigValidate, DpdkPortSection) {
  auto port_dpdk = [](const std::string& lines) {
    return with_line(12, "    guard: 1us\n    dpdk:\n" + lines);
  };
  const GatewayConfig ok =
      load_ok(port_dpdk("      device: net_null0\n      next_hop_mac: aa:bb:cc:dd:ee:ff"));
  ASSERT_TRUE(ok.wan_ports[0].dpdk);  // allowed with backend uring: switching is one key
  EXPECT_EQ(ok.wan_ports[0].dpdk->next_hop_mac, "aa:bb:cc:dd:ee:ff");
  EXPECT_EQ(ok.wan_ports[0].dpdk->rx_queue_size, 1024);
  EXPECT_EQ(load_error(port_dpdk("      device: net_null0\n      next_hop_mac: aa:bb:cc:dd:ee")),
            "gw.yaml:15:21: field 'wan_ports[0].dpdk.next_hop_mac': 'aa:bb:cc:dd:ee' is not a "
            "MAC address (expected aa:bb:cc:dd:ee:ff)");
  EXPECT_THAT(
      load_error(port_dpdk("      device: net_null0\n      next_hop_mac: 01:00:5e:00:00:01")),
      HasSubstr("'01:00:5e:00:00:01' is a multicast MAC address"));
  EXPECT_EQ(load_error(port_dpdk("      next_hop_mac: aa:bb:cc:dd:ee:ff")),
            "gw.yaml:14:7: field 'wan_ports[0].dpdk.device': missing required field");
}

TEST(ConfigValidate, DpdkLcoresNameTheShards) {
  const std::string base(kBase);
  const GatewayConfig one = load_ok(base + "dpdk: {lcores: [5]}\n");
  EXPECT_EQ(one.dpdk.lcores, std::vector<uint32_t>{5});
  // describe() writes it back and it loads again the same.
  EXPECT_EQ(load_ok(describe(one)).dpdk.lcores, one.dpdk.lcores);
  EXPECT_THAT(load_error(base + "dpdk: {lcores: [1, 2]}\n"),
              HasSubstr("field 'dpdk.lcores': several lcores (shards) need backend dpdk"));
  EXPECT_THAT(load_error(base + "dpdk: {lcores: [1, 1]}\n"), HasSubstr("lcore 1 is listed twice"));
  EXPECT_THAT(load_error(base + "dpdk: {lcore: 2, lcores: [1, 3]}\n"),
              HasSubstr("give either 'lcore' (2) or 'lcores', not both"));
  EXPECT_THAT(load_error(base + "dpdk: {lcores: []}\n"), HasSubstr("an empty list"));
  EXPECT_THAT(load_error(base + "dpdk: {lcores: 3}\n"), HasSubstr("a list of lcore ids"));
  EXPECT_THAT(load_error(base + "dpdk: {lcores: [1024]}\n"), HasSubstr("dpdk.lcores[0]"));
}

TEST(ConfigValidate, UringShardsNameTheField) {
  const GatewayConfig two =
      load_ok(with_line(2, "  name: site-a\n  shards: 2\n  shard_cpus: [0, 1]"));
  EXPECT_EQ(two.shards, 2u);
  EXPECT_EQ(two.shard_cpus, (std::vector<uint32_t>{0, 1}));
  const GatewayConfig again = load_ok(describe(two));  // describe() writes them back
  EXPECT_EQ(again.shards, two.shards);
  EXPECT_EQ(again.shard_cpus, two.shard_cpus);
  EXPECT_EQ(load_ok(std::string(kBase)).shards, 1u);
  EXPECT_THAT(load_error(with_line(2, "  name: site-a\n  shards: 0")),
              HasSubstr("field 'gateway.shards'"));
  EXPECT_THAT(load_error(with_line(2, "  name: site-a\n  shards: 65")),
              HasSubstr("field 'gateway.shards'"));
  EXPECT_THAT(load_error(with_line(2, "  name: site-a\n  shards: 2\n  shard_cpus: [0]")),
              HasSubstr("field 'gateway.shard_cpus': 1 CPUs for 2 shards"));
  EXPECT_THAT(
      load_error(with_line(2, "  name: site-a\n  shards: 2\n  shard_cpus: [0, 1]\n  cpu: 3")),
      HasSubstr("field 'gateway.shard_cpus': give either gateway.cpu (3) or"));
  EXPECT_THAT(load_error(with_line(2, "  name: site-a\n  shard_cpus: 3")),
              HasSubstr("a list of CPU numbers"));
  EXPECT_THAT(load_error(with_line(2, "  name: site-a\n  backend: dpdk\n  shards: 2")),
              HasSubstr("field 'gateway.shards': a setting of the uring backend; backend dpdk runs "
                        "its shards on dpdk.lcores"));
}

}  // namespace
}  // namespace detwan::dataplane::gw
