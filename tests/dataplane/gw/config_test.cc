// The gateway configuration: addresses, loading with defaults, describe() round trips, the
// example file, and the derived helpers. Validation rules are in config_validate_test.cc.
#include "dataplane/gw/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/dataplane/gw/config_test_util.h"

namespace detwan::dataplane::gw {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kBase;
using testing::load_error;
using testing::load_ok;
using ::testing::Not;
using testing::replace_line;
using testing::with_line;

// ---- prefixes and endpoints ----

TEST(ConfigPrefix, ParsesIpv4AndFormatsBack) {
  auto prefix = parse_prefix("10.20.2.0/24");
  ASSERT_TRUE(prefix) << prefix.error().message;
  EXPECT_FALSE(prefix->ipv6);
  EXPECT_EQ(prefix->length, 24);
  EXPECT_EQ(prefix->address[0], 10);
  EXPECT_EQ(prefix->address[1], 20);
  EXPECT_EQ(prefix->address[2], 2);
  EXPECT_EQ(prefix->address[3], 0);
  EXPECT_EQ(format_prefix(*prefix), "10.20.2.0/24");
  EXPECT_EQ(format_prefix(*parse_prefix(" 0.0.0.0/0 ")), "0.0.0.0/0");
  EXPECT_EQ(format_prefix(*parse_prefix("192.168.7.9/32")), "192.168.7.9/32");
}

TEST(ConfigPrefix, ParsesIpv6AndFormatsCanonically) {
  auto prefix = parse_prefix("fd00:0:0::/64");
  ASSERT_TRUE(prefix) << prefix.error().message;
  EXPECT_TRUE(prefix->ipv6);
  EXPECT_EQ(prefix->length, 64);
  EXPECT_EQ(prefix->address[0], 0xfd);
  EXPECT_EQ(format_prefix(*prefix), "fd00::/64");
  EXPECT_EQ(format_prefix(*parse_prefix("2001:DB8::1/128")), "2001:db8::1/128");
  EXPECT_EQ(format_prefix(*parse_prefix("::/0")), "::/0");
  for (const char* text : {"10.20.2.0/24", "fd00::/64", "2001:db8:1:2::/63", "0.0.0.0/0"}) {
    EXPECT_EQ(*parse_prefix(format_prefix(*parse_prefix(text))), *parse_prefix(text)) << text;
  }
}

TEST(ConfigPrefix, HostBitsSetIsAnErrorNamingTheNetwork) {
  auto prefix = parse_prefix("10.20.2.1/24");
  ASSERT_FALSE(prefix);
  EXPECT_EQ(prefix.error().message,
            "'10.20.2.1/24': host bits are set (the network is 10.20.2.0/24)");
  auto v6 = parse_prefix("fd00::1/64");
  ASSERT_FALSE(v6);
  EXPECT_THAT(v6.error().message, HasSubstr("the network is fd00::/64"));
  auto odd = parse_prefix("10.20.12.0/21");  // 12 = 0b1100: bit 21 (value 4) is a host bit
  ASSERT_FALSE(odd);
  EXPECT_THAT(odd.error().message, HasSubstr("the network is 10.20.8.0/21"));
}

TEST(ConfigPrefix, RejectsBadInput) {
  for (const char* text : {"", "10.20.2.0", "10.20.2.0/33", "10.20.2.0/-1", "10.20.2/24",
                           "10.20.2.0/ 24", "10.20.2.0/24x", "fd00::/129", "01.2.3.0/24",
                           "fd00::%eth0/64", "host/24", "10.20.2.0/", "256.0.0.0/8"}) {
    auto prefix = parse_prefix(text);
    EXPECT_FALSE(prefix) << text;
    if (!prefix) {
      EXPECT_EQ(prefix.error().code, common::ErrorCode::kInvalidArgument);
      EXPECT_THAT(prefix.error().message, HasSubstr(std::string("'") + text)) << text;
    }
  }
  EXPECT_THAT(parse_prefix("10.20.2.0").error().message, HasSubstr("missing prefix length"));
  EXPECT_THAT(parse_prefix("fd00::/129").error().message, HasSubstr("[0, 128]"));
}

TEST(ConfigEndpoint, ParsesIpv4AndIpv6) {
  auto v4 = parse_endpoint("10.101.12.1:4789");
  ASSERT_TRUE(v4) << v4.error().message;
  EXPECT_FALSE(v4->ipv6);
  EXPECT_EQ(v4->port, 4789);
  EXPECT_EQ(v4->address[3], 1);
  EXPECT_EQ(format_endpoint(*v4), "10.101.12.1:4789");
  auto v6 = parse_endpoint("[fd00:0::1]:65535");
  ASSERT_TRUE(v6) << v6.error().message;
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(v6->port, 65535);
  EXPECT_EQ(v6->address[15], 1);
  EXPECT_EQ(format_endpoint(*v6), "[fd00::1]:65535");
  auto any = parse_endpoint("0.0.0.0:0");
  ASSERT_TRUE(any);
  EXPECT_EQ(any->port, 0);
  EXPECT_EQ(*parse_endpoint(format_endpoint(*v6)), *v6);
}

// The grammar is common::parse_endpoint's (tests/common/net_address_test.cc has the table);
// the gateway takes IP literals only, port 0 included, and trims the text.
TEST(ConfigEndpoint, RejectsBadInput) {
  const std::pair<const char*, const char*> cases[] = {
      {"10.0.0.1", "no port"},
      {"10.0.0.1:65536", "[0, 65535]"},
      {"fd00::1:4789", "in brackets"},
      {"[10.0.0.1]:1", "not an IPv6 address"},
      {"gateway.example:4789", "an IP address is expected here"},
      {"[fe80::1%eth0]:4789", "an IP address is expected here"},
      {"", "no host"},
  };
  for (const auto& [text, expected] : cases) {
    auto endpoint = parse_endpoint(text);
    EXPECT_FALSE(endpoint) << text;
    if (!endpoint) {
      EXPECT_THAT(endpoint.error().message, HasSubstr(expected)) << text;
    }
  }
  EXPECT_EQ(parse_endpoint(" 10.0.0.1:0 ")->port, 0);
}

TEST(ConfigPrefix, ContainsAddressesOfItsVersionOnly) {
  const Prefix net = *parse_prefix("10.20.8.0/21");
  const Endpoint inside = *parse_endpoint("10.20.15.255:1");
  const Endpoint outside = *parse_endpoint("10.20.16.0:1");
  EXPECT_TRUE(prefix_contains(net, false, inside.address));
  EXPECT_FALSE(prefix_contains(net, false, outside.address));
  EXPECT_FALSE(prefix_contains(net, true, inside.address));  // version mismatch
  EXPECT_TRUE(prefix_contains(*parse_prefix("0.0.0.0/0"), false, outside.address));
  const Prefix v6 = *parse_prefix("fd00:1::/64");
  EXPECT_TRUE(prefix_contains(v6, true, parse_endpoint("[fd00:1::99]:1")->address));
  EXPECT_FALSE(prefix_contains(v6, true, parse_endpoint("[fd00:2::99]:1")->address));
  EXPECT_FALSE(prefix_contains(v6, true, nullptr));
  Prefix bogus = net;  // a hand-built length beyond the address acts as a host prefix
  bogus.length = 200;
  EXPECT_FALSE(prefix_contains(bogus, false, inside.address));
  EXPECT_TRUE(prefix_contains(bogus, false, net.address));
}

// ---- loading ----

TEST(ConfigLoad, ReadsTheBaseConfigWithDefaults) {
  const GatewayConfig config = load_ok(std::string(kBase));
  EXPECT_EQ(config.source, "gw.yaml");
  EXPECT_EQ(config.name, "site-a");
  EXPECT_EQ(config.backend, Backend::kUring);
  EXPECT_EQ(config.timing, TimingMode::kLowCpu);
  EXPECT_EQ(config.cpu, -1);
  EXPECT_EQ(config.control_socket, "");
  EXPECT_EQ(config.buffer_count, 8192u);
  EXPECT_EQ(config.batch, 32u);
  EXPECT_TRUE(config.tun.enabled);
  EXPECT_EQ(config.tun.name, "dtw0");
  EXPECT_THAT(config.tun.routes, ElementsAre(*parse_prefix("10.20.1.0/24")));
  ASSERT_EQ(config.wan_ports.size(), 2u);
  const WanPortConfig& wan1 = config.wan_ports[0];
  EXPECT_EQ(wan1.local, *parse_endpoint("10.101.12.1:4789"));
  EXPECT_EQ(wan1.line_rate_bps, 1'000'000'000u);
  EXPECT_EQ(wan1.mtu_bytes, 1500u);
  EXPECT_EQ(wan1.guard_ns, 1'000);
  EXPECT_EQ(wan1.capacity_frames, 65536u);
  EXPECT_FALSE(wan1.dpdk);
  EXPECT_TRUE(config.wan_ports[1].local.ipv6);
  ASSERT_EQ(config.peers.size(), 2u);
  EXPECT_EQ(config.peers[0].min_path_delay_ns, 2'000'000);
  EXPECT_FALSE(config.peers[0].clock_offset_ns);
  EXPECT_EQ(config.peers[0].keepalive_interval_ns, 100'000'000);
  ASSERT_EQ(config.tunnels.size(), 3u);
  const TunnelConfig& t7 = config.tunnels[0];
  EXPECT_EQ(t7.id, 7u);
  EXPECT_EQ(t7.rate_bps, 100'000'000u);
  EXPECT_EQ(t7.slots.size(), 12u);
  EXPECT_EQ(t7.bound_ns, 5'000'000);
  EXPECT_EQ(t7.burst_bytes, 0u);
  EXPECT_EQ(t7.dscp, 46);
  EXPECT_EQ(t7.replay_window_bits, 4096u);
  EXPECT_EQ(t7.max_hold_ns, 1'000'000'000);
  EXPECT_EQ(config.tunnels[1].over_rate, sched::OverRateAction::kBestEffort);
  EXPECT_THAT(config.tunnels[1].udp_ports,
              ElementsAre(PortRange{5201, 5210}, PortRange{9000, 9000}));
  EXPECT_EQ(config.tunnels[2].service_listen, *parse_endpoint("127.0.0.1:5000"));
  EXPECT_EQ(config.tunnels[2].service_deliver, *parse_endpoint("127.0.0.1:6000"));
}

TEST(ConfigLoad, MinimalConfigGetsEveryStructDefault) {
  const GatewayConfig config = load_ok(
      "gateway: {name: a}\n"
      "wan_ports: [{name: w, local: 10.0.0.1:0, line_rate: 1gbit}]\n"
      "peers: [{name: p, wan_port: w, endpoint: 10.0.0.2:4789}]\n"
      "tunnels: [{id: 1, peer: p, rate: 10mbit, slots: 0-9, auth: none}]\n");
  WanPortConfig port;
  port.name = "w";
  port.local = *parse_endpoint("10.0.0.1:0");
  port.line_rate_bps = 1'000'000'000;
  EXPECT_EQ(config.wan_ports.at(0), port);
  PeerConfig peer;
  peer.name = "p";
  peer.wan_port = "w";
  peer.endpoint = *parse_endpoint("10.0.0.2:4789");
  EXPECT_EQ(config.peers.at(0), peer);
  TunnelConfig tunnel;
  tunnel.id = 1;
  tunnel.peer = "p";
  tunnel.rate_bps = 10'000'000;
  tunnel.slots = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(config.tunnels.at(0), tunnel);
  EXPECT_EQ(config.tun, TunConfig{});
  EXPECT_EQ(config.dpdk, DpdkConfig{});
}

TEST(ConfigLoad, SlotListsAndStringsAreTheSameSortedSet) {
  const GatewayConfig a = load_ok(with_line(28, "    slots: \"6-11, 0-5\""));
  const GatewayConfig b =
      load_ok(with_line(28, "    slots: [11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]"));
  EXPECT_EQ(a.tunnels[0].slots, b.tunnels[0].slots);
  EXPECT_THAT(a.tunnels[0].slots, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
}

TEST(ConfigLoad, ClockOffsetIsAutoOrASignedDuration) {
  EXPECT_FALSE(load_ok(replace_line(kBase, 20, "    clock_offset: auto")).peers[0].clock_offset_ns);
  EXPECT_EQ(load_ok(with_line(20, "    clock_offset: -150us")).peers[0].clock_offset_ns, -150'000);
  EXPECT_EQ(load_ok(with_line(20, "    clock_offset: 2.5ms")).peers[0].clock_offset_ns, 2'500'000);
  EXPECT_EQ(load_error(with_line(20, "    clock_offset: -3601s")),
            "gw.yaml:20:19: field 'peers[0].clock_offset': -3601s is out of range [-3600s, 3600s]");
  EXPECT_EQ(load_error(with_line(20, "    clock_offset: 2h")),
            "gw.yaml:20:19: field 'peers[0].clock_offset': 2h is out of range [-3600s, 3600s]");
  EXPECT_EQ(load_error(with_line(20, "    clock_offset: 2w")),
            "gw.yaml:20:19: field 'peers[0].clock_offset': '2w': unknown duration unit 'w' (use "
            "ns, us, ms, s, m, h, d)");
  EXPECT_THAT(load_error(with_line(20, "    clock_offset: soon")),
              HasSubstr("field 'peers[0].clock_offset'"));
}

TEST(ConfigLoad, TunnelUnitsAndPolicies) {
  const GatewayConfig config = load_ok(with_line(
      29,
      "    bound: 5ms\n    burst: 64kb\n    shaper_rate: 150mbit\n    max_wait: 250us\n"
      "    late: drop\n    max_hold: 20ms\n    queue: 64\n    dscp: 34\n    replay_window: 1024\n"
      "    playout_capacity: 100"));
  const TunnelConfig& t = config.tunnels[0];
  EXPECT_EQ(t.burst_bytes, 65536u);
  EXPECT_EQ(t.shaper_rate_bps, 150'000'000u);
  EXPECT_EQ(t.max_wait_ns, 250'000);
  EXPECT_EQ(t.late, sched::LateAction::kDrop);
  EXPECT_EQ(t.max_hold_ns, 20'000'000);
  EXPECT_EQ(t.queue_frames, 64u);
  EXPECT_EQ(t.dscp, 34);
  EXPECT_EQ(t.replay_window_bits, 1024u);
  EXPECT_EQ(t.playout_capacity_frames, 100u);
}

TEST(ConfigLoad, MissingFileIsAnIoError) {
  auto config = load_gateway_config("/nonexistent/detwan/gw.yaml");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, common::ErrorCode::kIo);
  EXPECT_THAT(config.error().message, HasSubstr("/nonexistent/detwan/gw.yaml: cannot open"));
}

TEST(ConfigLoad, YamlSyntaxErrorNamesTheLine) {
  EXPECT_THAT(load_error(with_line(30, "    match: {dst: [10.20.2.0/24]")),
              HasSubstr("gw.yaml:31:"));
}

// ---- describe ----

GatewayConfig round_trip(const GatewayConfig& config) {
  const std::string text = describe(config);
  auto again = load_gateway_config_string(text, "described.yaml");
  EXPECT_TRUE(again) << (again ? "" : again.error().message) << "\n" << text;
  if (!again) return {};
  again->source = config.source;
  return *again;
}

TEST(ConfigDescribe, RoundTripsTheBaseConfig) {
  const GatewayConfig config = load_ok(std::string(kBase));
  EXPECT_EQ(round_trip(config), config);
}

TEST(ConfigDescribe, RoundTripsEveryNonDefaultValue) {
  const std::string yaml =
      "gateway: {name: gw.x_1, backend: dpdk, timing: busy, cpu: 3, control_socket: \"@gw "
      "\\\"x\\\"\","
      " admin_socket: /run/gw.sock, admin_mode: 0640, admin_uids: [7, 4294967294],"
      " buffers: 1024, batch: 64, wan_gso: false, wan_gro: false}\n"
      "tun: {enabled: true, name: tun-9, mtu: 1280, routes: [10.0.0.0/8, \"fd00::/8\"],"
      " offload: false, queue: 777}\n"
      "dpdk: {eal: [--no-huge, \"--vdev=net_memif0,role=server\"], mbufs: 4095, lcore: 2}\n"
      "wan_ports:\n"
      "  - {name: w6, local: \"[fd00::1]:0\", line_rate: 2.5gbit, mtu: 1500, cycle: 500us,\n"
      "     slots: 50, guard: 1.5us, base_time: 1700000000s, best_effort_dscp: 8, capacity: 1000,\n"
      "     dpdk: {device: \"0000:3b:00.0\", local_mac: \"02:00:00:00:00:01\",\n"
      "            next_hop_mac: \"AA:bb:cc:dd:ee:f0\", rx_queue: 512, tx_queue: 2048}}\n"
      "peers:\n"
      "  - {name: p, wan_port: w6, endpoint: \"[fd00::2]:4789\", clock_offset: -1.234567ms,\n"
      "     time_exchange_interval: 250ms, keepalive_interval: 20ms, dead_after: 90ms,\n"
      "     min_path_delay: 3ms}\n"
      "tunnels:\n"
      "  - {id: 4294967295, peer: p, owner: \"agent:lab \\\"x\\\"\",\n"
      "     rate: 300mbit, slots: \"0-9,40-49\", burst: 1.5mb,\n"
      "     over_rate: best-effort, shaper_rate: 1gbit, queue: 16, max_wait: 1ms, bound: 4ms,\n"
      "     late: drop, max_hold: 4ms, playout_capacity: 7, dscp: 0, replay_window: 65536,\n"
      "     match: {dst: [\"fd00:9::/32\", 192.0.2.0/24], udp_ports: [1, 65535, 100-200]},\n"
      "     service: {deliver: \"[::1]:9\"}, auth: none}\n";
  const GatewayConfig config = load_ok(yaml);
  ASSERT_EQ(config.wan_ports.size(), 1u);
  EXPECT_EQ(config.control_socket, "@gw \"x\"");
  EXPECT_FALSE(config.wan_gso);
  EXPECT_FALSE(config.wan_gro);
  EXPECT_FALSE(config.tun.offload);
  EXPECT_EQ(config.tun.queue_packets, 777u);
  EXPECT_EQ(config.peers[0].clock_offset_ns, -1'234'567);
  EXPECT_EQ(config.wan_ports[0].base_time_ns, 1'700'000'000'000'000'000);
  EXPECT_EQ(config.tunnels[0].burst_bytes, 1'572'864u);
  EXPECT_EQ(config.tunnels[0].owner, "agent:lab \"x\"");
  EXPECT_EQ(config.admin_mode, 0640u);
  EXPECT_EQ(round_trip(config), config);
}

TEST(ConfigDescribe, SpellsOutDefaultsAndDerivedValues) {
  const std::string text = describe(load_ok(std::string(kBase)));
  EXPECT_THAT(text, HasSubstr("  backend: uring\n"));
  EXPECT_THAT(text, HasSubstr("    capacity: 65536\n"));
  EXPECT_THAT(text, HasSubstr("    replay_window: 4096\n"));
  EXPECT_THAT(text, HasSubstr("    burst: auto\n"));
  EXPECT_THAT(text, HasSubstr("    clock_offset: auto"));
  // wan1: 10us slots, 1500 - 68 payload; wan2 (IPv6): 1500 - 88.
  EXPECT_THAT(text, HasSubstr("# slot length 10us; max frame 1518 bytes"));
  EXPECT_THAT(text, HasSubstr("max tunnel payload 1432 bytes (mtu - 68 bytes of IPv4"));
  EXPECT_THAT(text, HasSubstr("max tunnel payload 1412 bytes (mtu - 88 bytes of IPv6"));
  // Unreserved slots of wan1: 12-19 and 42-99.
  EXPECT_THAT(text, HasSubstr("best effort: slots 12-19,42-99 (66/100)"));
  // Tunnel 7: 12 slots, guaranteed (120 - 1 - 12.144) us per ms = 106.856mbit.
  EXPECT_THAT(text, HasSubstr("12/100 slots (12.0% of the cycle), rate 100mbit = 10.0% of the "
                              "line rate 1gbit"));
  EXPECT_THAT(text, HasSubstr("guaranteed 106.856mbit (10.7% of the port)"));
  EXPECT_THAT(text, HasSubstr("delivered at tx timestamp + 5ms"));
}

TEST(ConfigDescribe, RoundTripsTenantSourcesAndTheForeignSourcePolicy) {
  const GatewayConfig config =
      load_ok(with_line(30,
                        "    match: {dst: [10.20.2.0/24], src: [10.20.1.5/32, 10.20.1.64/26]}\n"
                        "    foreign_source: best-effort"));
  const std::string text = describe(config);
  EXPECT_THAT(text, HasSubstr("      src: [\"10.20.1.5/32\", \"10.20.1.64/26\"]\n"));
  EXPECT_THAT(text, HasSubstr("    foreign_source: best-effort\n"));
  EXPECT_THAT(text, HasSubstr("      src: []  # any source\n"));  // tunnel 9
  EXPECT_EQ(round_trip(config), config);
}

TEST(ConfigDescribe, IsAFixedPoint) {
  const GatewayConfig config = load_ok(std::string(kBase));
  const std::string once = describe(config);
  EXPECT_EQ(describe(round_trip(config)), once);
}

// ---- the example file ----

std::string example_path() {
  const char* root = std::getenv("DETWAN_SOURCE_ROOT");
  return std::string(root != nullptr ? root : ".") + "/docs/examples/gateway.yaml";
}

// The example's tunnels name their keys in /etc/detwan/keys/ (as an operator would): loaded
// with that directory replaced by one holding fresh keys, readable by this user only.
TEST(ConfigExample, DocsExampleLoadsAndRoundTrips) {
  std::ifstream in(example_path());
  ASSERT_TRUE(in) << example_path();
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path keys = fs::path(::testing::TempDir()) / "detwan-example-keys";
  fs::create_directories(keys);
  fs::permissions(keys, fs::perms::owner_all, fs::perm_options::replace);
  for (const char* tunnel : {"7", "8", "9"}) {
    const fs::path key = keys / (std::string("tunnel-") + tunnel + ".key");
    std::ofstream(key) << std::string(64, tunnel[0]) << "\n";
    fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  }
  const std::string operator_dir = "secret_file: /etc/detwan/keys";
  const std::string test_dir = "secret_file: " + keys.string();
  size_t replaced = 0;
  for (size_t at = text.find(operator_dir); at != std::string::npos;
       at = text.find(operator_dir, at + test_dir.size())) {
    text.replace(at, operator_dir.size(), test_dir);
    ++replaced;
  }
  EXPECT_EQ(replaced, 3u);  // one key file per tunnel
  const fs::path copy = keys / "gateway.yaml";
  std::ofstream(copy) << text;
  auto config = load_gateway_config(copy.string());
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->wan_ports.size(), 2u);
  EXPECT_EQ(config->peers.size(), 2u);
  ASSERT_EQ(config->tunnels.size(), 3u);
  bool service = false, udp_ports = false, downgrade = false, bound = false;
  for (const TunnelConfig& tunnel : config->tunnels) {
    service = service || tunnel.service_listen || tunnel.service_deliver;
    udp_ports = udp_ports || !tunnel.udp_ports.empty();
    downgrade = downgrade || tunnel.over_rate == sched::OverRateAction::kBestEffort;
    bound = bound || tunnel.bound_ns > 0;
    // The normal case: every tunnel authenticated, its secret read from its file.
    ASSERT_TRUE(tunnel.auth.has_value()) << tunnel.id;
    EXPECT_EQ(tunnel.auth->keys.at(0).secret,
              *aead::key_from_hex(std::string(64, static_cast<char>('0' + tunnel.id))));
  }
  EXPECT_TRUE(service);
  EXPECT_TRUE(udp_ports);
  EXPECT_TRUE(downgrade);
  EXPECT_TRUE(bound);
  EXPECT_EQ(config->metrics.listen, "127.0.0.1:9464");  // the example shows the exporter
  // describe() never prints a secret (only its fingerprint), so the keys do not round-trip:
  // everything else does.
  const std::string described = describe(*config);
  EXPECT_EQ(described.find(std::string(64, '7')), std::string::npos);
  EXPECT_NE(described.find(aead::fingerprint(config->tunnels[0].auth->keys[0].secret)),
            std::string::npos);
  GatewayConfig without_keys = *config;
  for (TunnelConfig& tunnel : without_keys.tunnels) tunnel.auth.reset();
  EXPECT_EQ(round_trip(without_keys), without_keys);
}

// ---- derived helpers ----

TEST(ConfigHelpers, PortGclConfigMapsThePortAndItsTunnels) {
  const GatewayConfig config = load_ok(std::string(kBase));
  const WanPortConfig* wan1 = find_wan_port(config, "wan1");
  ASSERT_NE(wan1, nullptr);
  EXPECT_EQ(find_wan_port(config, "wan3"), nullptr);
  ASSERT_NE(find_peer(config, "site-c"), nullptr);
  EXPECT_EQ(find_peer(config, "site-c")->wan_port, "wan2");
  EXPECT_EQ(find_peer(config, "nobody"), nullptr);
  const sched::GclConfig gcl = port_gcl_config(config, *wan1);
  EXPECT_EQ(gcl.cycle_ns, 1'000'000);
  EXPECT_EQ(gcl.slot_count, 100u);
  EXPECT_EQ(gcl.guard_ns, 1'000);
  EXPECT_EQ(gcl.line_rate_bps, 1'000'000'000u);
  EXPECT_EQ(gcl.max_frame_bytes, 1518u);
  ASSERT_EQ(gcl.tunnels.size(), 2u);  // 7 and 9; 11 is on wan2
  EXPECT_EQ(gcl.tunnels[0].tunnel_id, 7u);
  EXPECT_EQ(gcl.tunnels[1].reserved_rate_bps, 200'000'000u);
  EXPECT_TRUE(sched::GateControlList::create(gcl));
  EXPECT_EQ(max_frame_bytes(*wan1), 1518u);
  EXPECT_EQ(max_tunnel_payload_bytes(*wan1), 1432u);
  EXPECT_EQ(max_tunnel_payload_bytes(config.wan_ports[1]), 1412u);
}

TEST(ConfigHelpers, EqualityComparesEveryField) {
  const GatewayConfig a = load_ok(std::string(kBase));
  GatewayConfig b = a;
  EXPECT_EQ(a, b);
  b.tunnels[1].udp_ports[1].last = 9001;
  EXPECT_NE(a, b);
  b = a;
  b.peers[0].clock_offset_ns = 0;  // 0 is not "auto"
  EXPECT_NE(a, b);
  b = a;
  b.source = "other.yaml";
  EXPECT_NE(a, b);
  EXPECT_THAT(describe(a), Not(HasSubstr("INVALID")));
}

}  // namespace
}  // namespace detwan::dataplane::gw
