// control/model/topology: the YAML loader (every error names file:line and field) and finish()
// on topologies built in code.
#include "control/model/topology.h"

#include <string>

#include <gtest/gtest.h>

#include "tests/control/topology_builder.h"

namespace detwan::control::model {
namespace {

// Two sites with gateways, one without, a transit node in the middle.
constexpr const char* kLab = R"yaml(domain: lab
agent:
  name: agent-1
  listen: 127.0.0.1:0
  allow: [10.0.0.0/8]
  max_connections: 8
  tunnel_ids: 2000-2999
sites:
  - name: a
    gateway: gw-a
    tunnel_prefixes: [10.1.0.0/16, 10.11.0.0/16]
  - name: b
    gateway: gw-b
    tunnel_prefixes: [10.2.0.0/16]
  - name: c
gateways:
  - name: gw-a
    site: a
    admin_socket: /run/detwan/gw-a.sock
    playout_error: 20us
    processing_delay: 30us
    ports:
      - name: wan0
        link: a-r
    peers:
      - name: to-b
        port: wan0
        gateway: gw-b
  - name: gw-b
    site: b
    admin_socket: /run/detwan/gw-b.sock
    ports:
      - name: wan1
        link: r-b
    peers:
      - name: to-a
        port: wan1
        gateway: gw-a
nodes: [r]
links:
  - name: a-r
    ends: [a, r]
    capacity: 200mbit
    delay: 5ms
    jitter: 100us
    loss: 0.1%
    reservable: 50%
    mtu: 1500
    cycle: 1ms
    slots: 100
    guard: 2us
  - name: r-b
    ends: [r, b]
    capacity: 1gbit
    delay: 3ms
  - name: r-c
    ends: [r, c]
    capacity: 100mbit
)yaml";

// The 1-based line of the first line of `text` containing `needle`.
int line_of(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  int line = 1;
  for (size_t i = 0; i < at; ++i) line += text[i] == '\n' ? 1 : 0;
  return line;
}

// `text` with the first occurrence of `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Loads `yaml` as "topo.yaml", expects a refusal whose message names "topo.yaml:<line>:" (the
// line holding `line_needle`) and `field`, and contains `words`.
void expect_error(const std::string& yaml, const std::string& line_needle, const std::string& field,
                  const std::string& words) {
  const auto t = load_topology_string(yaml, "topo.yaml");
  ASSERT_FALSE(t.has_value()) << "loaded although it should not";
  const std::string& message = t.error().message;
  EXPECT_EQ(t.error().code, common::ErrorCode::kConfig) << message;
  const std::string at = "topo.yaml:" + std::to_string(line_of(yaml, line_needle)) + ":";
  EXPECT_EQ(message.rfind(at, 0), 0u) << "expected to start with '" << at << "': " << message;
  EXPECT_NE(message.find("field '" + field + "'"), std::string::npos)
      << "expected field '" << field << "': " << message;
  EXPECT_NE(message.find(words), std::string::npos) << "expected '" << words << "': " << message;
}

TEST(TopologyLoad, LabFileLoadsWithIndicesAndDerivedFigures) {
  const auto loaded = load_topology_string(kLab, "lab.yaml");
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  const Topology& t = *loaded;
  EXPECT_EQ(t.source, "lab.yaml");
  EXPECT_EQ(t.domain, "lab");
  EXPECT_EQ(t.agent.name, "agent-1");
  EXPECT_EQ(t.agent.api.listen.port, 0);
  ASSERT_EQ(t.agent.api.allow.size(), 1u);
  EXPECT_EQ(common::format_ip_prefix(t.agent.api.allow[0]), "10.0.0.0/8");
  EXPECT_EQ(t.agent.api.max_connections, 8u);
  EXPECT_EQ(t.agent.first_tunnel_id, 2000u);
  EXPECT_EQ(t.agent.last_tunnel_id, 2999u);

  // Nodes: sites first in file order, then transit nodes.
  ASSERT_EQ(t.nodes.size(), 4u);
  EXPECT_EQ(t.find_node("a"), 0u);
  EXPECT_EQ(t.find_node("b"), 1u);
  EXPECT_EQ(t.find_node("c"), 2u);
  EXPECT_EQ(t.find_node("r"), 3u);
  EXPECT_EQ(t.find_node("nope"), kNone);
  EXPECT_EQ(t.nodes[3].site, kNone);  // transit
  EXPECT_EQ(t.nodes[1].site, 1u);
  EXPECT_EQ(t.find_site("c"), 2u);
  EXPECT_EQ(t.find_site("r"), kNone);
  EXPECT_EQ(t.sites[0].node, 0u);
  ASSERT_EQ(t.sites[0].tunnel_prefixes.size(), 2u);
  EXPECT_EQ(common::format_ip_prefix(t.sites[0].tunnel_prefixes[1]), "10.11.0.0/16");

  ASSERT_EQ(t.links.size(), 3u);
  const uint32_t ar = t.find_link("a-r");
  const uint32_t rb = t.find_link("r-b");
  const uint32_t rc = t.find_link("r-c");
  ASSERT_NE(ar, kNone);
  const Link& l = t.links[ar];
  EXPECT_EQ(l.ends[0], 0u);
  EXPECT_EQ(l.ends[1], 3u);
  EXPECT_EQ(l.other_end(0), 3u);
  EXPECT_EQ(l.other_end(3), 0u);
  EXPECT_EQ(l.other_end(1), kNone);
  EXPECT_EQ(l.direction_from(0), 0);
  EXPECT_EQ(l.direction_from(3), 1);
  EXPECT_EQ(l.capacity_bps, 200'000'000u);
  EXPECT_EQ(l.delay_ns, 5'000'000);
  EXPECT_EQ(l.jitter_ns, 100'000);
  EXPECT_EQ(l.min_delay_ns(), 4'900'000);
  EXPECT_EQ(l.max_delay_ns(), 5'100'000);
  EXPECT_DOUBLE_EQ(l.loss, 0.001);
  EXPECT_EQ(l.reservable_bps(), 100'000'000u);
  EXPECT_EQ(l.reservable_slots(), 50u);
  EXPECT_EQ(l.cycle_ns, 1'000'000);
  EXPECT_EQ(l.slot_count, 100u);
  EXPECT_EQ(l.guard_ns, 2'000);
  EXPECT_EQ(l.mtu_bytes, 1500u);
  // Defaults where the file says nothing.
  EXPECT_DOUBLE_EQ(t.links[rb].reservable, 0.9);
  EXPECT_EQ(t.links[rb].reservable_bps(), 900'000'000u);
  EXPECT_EQ(t.links[rb].reservable_slots(), 90u);
  EXPECT_EQ(t.links[rb].guard_ns, 0);

  // Incident links.
  EXPECT_EQ(t.nodes[3].links, (std::vector<uint32_t>{ar, rb, rc}));
  EXPECT_EQ(t.nodes[0].links, (std::vector<uint32_t>{ar}));

  // Gateways, ports and peers resolved to indices.
  const uint32_t ga = t.find_gateway("gw-a");
  const uint32_t gb = t.find_gateway("gw-b");
  ASSERT_NE(ga, kNone);
  ASSERT_NE(gb, kNone);
  EXPECT_EQ(t.sites[0].gateway, ga);
  EXPECT_EQ(t.sites[2].gateway, kNone);
  EXPECT_EQ(t.gateways[ga].site, 0u);
  EXPECT_EQ(t.gateways[ga].admin_socket, "/run/detwan/gw-a.sock");
  EXPECT_EQ(t.gateways[ga].playout_error_ns, 20'000);
  EXPECT_EQ(t.gateways[ga].processing_delay_ns, 30'000);
  EXPECT_EQ(t.gateways[gb].playout_error_ns, 100'000);  // default
  EXPECT_EQ(t.gateways[gb].processing_delay_ns, 50'000);
  EXPECT_EQ(t.gateway_at_node(0), ga);
  EXPECT_EQ(t.gateway_at_node(1), gb);
  EXPECT_EQ(t.gateway_at_node(2), kNone);  // site without gateway
  EXPECT_EQ(t.gateway_at_node(3), kNone);  // transit
  const GatewayPort* port = t.gateways[ga].port_on_link(ar);
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->name, "wan0");
  EXPECT_EQ(t.gateways[ga].port_on_link(rb), nullptr);
  const GatewayPeer* peer = t.gateways[ga].peer_via("wan0", gb);
  ASSERT_NE(peer, nullptr);
  EXPECT_EQ(peer->name, "to-b");
  EXPECT_EQ(t.gateways[ga].peer_via("wan1", gb), nullptr);
  EXPECT_EQ(t.gateways[ga].peer_via("wan0", ga), nullptr);
}

TEST(TopologyLoad, FileOnDiskNamesItsPath) {
  const auto missing = load_topology("/nonexistent/detwan/topo.yaml");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("/nonexistent/detwan/topo.yaml"), std::string::npos);
}

TEST(TopologyLoadErrors, UnknownKey) {
  expect_error(replaced(kLab, "    mtu: 1500\n", "    mtu: 1500\n    colour: blue\n"), "colour",
               "links[0].colour", "unknown key 'colour'");
  expect_error(replaced(kLab, "domain: lab\n", "domain: lab\nsitez: []\n"), "sitez", "sitez",
               "unknown key");
}

TEST(TopologyLoadErrors, BadUnit) {
  expect_error(replaced(kLab, "capacity: 200mbit", "capacity: 200mbitz"), "200mbitz",
               "links[0].capacity", "200mbitz");
  expect_error(replaced(kLab, "delay: 5ms", "delay: 5xs"), "5xs", "links[0].delay", "5xs");
}

TEST(TopologyLoadErrors, LinkEndIsNotANode) {
  expect_error(replaced(kLab, "ends: [r, b]", "ends: [r, x]"), "ends: [r, x]", "links[1].ends[1]",
               "'x' is neither a site nor a transit node");
}

TEST(TopologyLoadErrors, LinkJoiningANodeToItself) {
  expect_error(replaced(kLab, "ends: [r, c]", "ends: [r, r]"), "ends: [r, r]", "links[2].ends",
               "two different nodes");
}

TEST(TopologyLoadErrors, CycleNotAMultipleOfSlots) {
  expect_error(replaced(kLab, "slots: 100", "slots: 3"), "slots: 3", "links[0].slots",
               "not a multiple of 3 slots");
}

TEST(TopologyLoadErrors, CycleNotAMultipleOfTheDefaultSlotCount) {
  // No `slots:` key: the default 100 slots do not divide 1000050 ns. The message must say so
  // (not that `slots` is missing: it is optional).
  const std::string yaml =
      replaced(kLab, "    delay: 3ms\n", "    delay: 3ms\n    cycle: 1000050ns\n");
  expect_error(yaml, "cycle: 1000050ns", "links[1].cycle", "not a multiple of 100 slots");
}

TEST(TopologyLoadErrors, GuardNotShorterThanASlot) {
  expect_error(replaced(kLab, "guard: 2us", "guard: 10us"), "guard: 10us", "links[0].guard",
               "out of range");
  // One ns below the 10 us slot is accepted.
  const auto ok = load_topology_string(replaced(kLab, "guard: 2us", "guard: 9999ns"), "topo.yaml");
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(ok->links[0].guard_ns, 9'999);
}

TEST(TopologyLoadErrors, AdminSocketNotAbsolute) {
  expect_error(replaced(kLab, "admin_socket: /run/detwan/gw-b.sock", "admin_socket: gw-b.sock"),
               "admin_socket: gw-b.sock", "gateways[1].admin_socket", "absolute path");
}

TEST(TopologyLoadErrors, PeerViaAPortTheGatewayDoesNotHave) {
  const std::string yaml = replaced(kLab, "      - name: to-a\n        port: wan1",
                                    "      - name: to-a\n        port: wan9");
  expect_error(yaml, "port: wan9", "gateways[1].peers[0].port", "wan9");
}

TEST(TopologyLoadErrors, LinkEndingAtAGatewaySiteWithoutAPortOnIt) {
  // gw-b's port moves to a link that does not end at b; link r-b then ends at b with no port.
  const std::string yaml = replaced(kLab, "        link: r-b", "        link: r-c");
  const auto t = load_topology_string(yaml, "topo.yaml");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("topo.yaml:"), std::string::npos) << t.error().message;
  // Both problems are errors; whichever is reported names a line of the file and a field.
  EXPECT_NE(t.error().message.find("field '"), std::string::npos) << t.error().message;

  // A third link ending at a (no port of gw-a on it).
  const std::string extra =
      std::string(kLab) + "  - name: a-c\n    ends: [a, c]\n    capacity: 100mbit\n";
  expect_error(extra, "ends: [a, c]", "links[3].ends[0]",
               "link 'a-c' ends at site 'a', but gateway 'gw-a' has no port on it");
}

TEST(TopologyLoadErrors, GatewayAndSiteDisagree) {
  // gw-b says it serves site a, whose gateway is gw-a.
  expect_error(replaced(kLab, "    site: b\n", "    site: a\n"),
               "    site: a\n    admin_socket: /run/detwan/gw-b", "gateways[1].site",
               "site 'a' names gateway 'gw-a'");
  // gw-b says it serves site c, which names no gateway.
  expect_error(replaced(kLab, "    site: b\n", "    site: c\n"), "    site: c\n",
               "gateways[1].site", "site 'c' names no gateway");
}

TEST(TopologyLoadErrors, PortOnALinkThatDoesNotEndAtTheGatewaysSite) {
  expect_error(replaced(kLab, "        link: a-r", "        link: r-b"), "        link: r-b",
               "gateways[0].ports[0].link", "link 'r-b' does not end at site 'a'");
}

TEST(TopologyLoadErrors, PeerNamingItsOwnGateway) {
  expect_error(replaced(kLab, "        gateway: gw-b", "        gateway: gw-a"),
               "        gateway: gw-a", "gateways[0].peers[0].gateway", "another gateway");
}

TEST(TopologyLoadErrors, OverlappingTunnelPrefixesBetweenSites) {
  const std::string yaml =
      replaced(kLab, "tunnel_prefixes: [10.2.0.0/16]", "tunnel_prefixes: [10.1.2.0/24]");
  expect_error(yaml, "10.1.2.0/24", "sites[1].tunnel_prefixes[0]", "10.1.0.0/16");
}

TEST(TopologyLoadErrors, OverlappingTunnelPrefixesWithinASite) {
  const std::string yaml =
      replaced(kLab, "[10.1.0.0/16, 10.11.0.0/16]", "[10.1.0.0/16, 10.1.0.0/24]");
  expect_error(yaml, "10.1.0.0/24", "sites[0].tunnel_prefixes[1]", "overlap");
}

TEST(TopologyLoadErrors, DuplicateNames) {
  // A transit node named like a site.
  {
    const std::string yaml = replaced(kLab, "nodes: [r]", "nodes: [r, c]");
    expect_error(yaml, "nodes: [r, c]", "nodes[1]", "'c'");
  }
  // Two links named r-b.
  expect_error(replaced(kLab, "  - name: r-c\n", "  - name: r-b\n"),
               "  - name: r-b\n    ends: [r, c]", "links[2].name", "'r-b'");
  // Two gateways named gw-a (site b names gw-a too, so only the name is wrong).
  expect_error(replaced(replaced(kLab, "  - name: gw-b\n", "  - name: gw-a\n"),
                        "    gateway: gw-b\n", "    gateway: gw-a\n"),
               "  - name: gw-a\n    site: b", "gateways[1].name", "'gw-a'");
  // Two ports of one gateway with the same name.
  expect_error(
      replaced(std::string(kLab), "      - name: wan0\n        link: a-r\n",
               "      - name: wan0\n        link: a-r\n      - name: wan0\n        link: r-b\n"),
      "      - name: wan0\n        link: r-b", "gateways[0].ports[1].name", "'wan0'");
}

TEST(TopologyLoadErrors, DuplicateSiteNamesPointAtTheSecondSite) {
  const std::string yaml = replaced(kLab, "  - name: c\n", "  - name: a\n");
  const auto t = load_topology_string(yaml, "topo.yaml");
  ASSERT_FALSE(t.has_value());
  // The second "- name: a" is the line after b's prefixes.
  const int second = line_of(yaml, "tunnel_prefixes: [10.2.0.0/16]") + 1;
  EXPECT_EQ(t.error().message.rfind("topo.yaml:" + std::to_string(second) + ":", 0), 0u)
      << t.error().message;
  EXPECT_NE(t.error().message.find("field 'sites[2].name'"), std::string::npos)
      << t.error().message;
}

TEST(TopologyLoadErrors, MiscRangesAndReferences) {
  expect_error(replaced(kLab, "loss: 0.1%", "loss: 100%"), "loss: 100%", "links[0].loss",
               "loses everything");
  expect_error(replaced(kLab, "reservable: 50%", "reservable: 0"), "reservable: 0",
               "links[0].reservable", "above 0");
  expect_error(replaced(kLab, "capacity: 100mbit", "capacity: 999bit"), "capacity: 999bit",
               "links[2].capacity", "1kbit");
  expect_error(replaced(kLab, "    gateway: gw-b\n", "    gateway: gw-x\n"), "gateway: gw-x",
               "sites[1].gateway", "'gw-x'");
  expect_error(replaced(kLab, "        link: r-b", "        link: r-q"), "link: r-q",
               "gateways[1].ports[0].link", "'r-q'");
  expect_error(replaced(kLab, "        gateway: gw-a", "        gateway: gw-q"), "gateway: gw-q",
               "gateways[1].peers[0].gateway", "'gw-q'");
  expect_error(replaced(kLab, "tunnel_ids: 2000-2999", "tunnel_ids: 3000-2999"),
               "tunnel_ids: 3000-2999", "agent.tunnel_ids", "3000-2999");
  expect_error(replaced(kLab, "tunnel_ids: 2000-2999", "tunnel_ids: 2000-2999x"),
               "tunnel_ids: 2000-2999x", "agent.tunnel_ids", "2000-2999x");
  expect_error(replaced(kLab, "tunnel_ids: 2000-2999", "tunnel_ids: 2000-2999-3999"),
               "tunnel_ids: 2000-2999-3999", "agent.tunnel_ids", "2000-2999-3999");
  expect_error(replaced(kLab, "domain: lab", "domain: 'l a b'"), "domain:", "domain",
               "not a valid name");
  expect_error(replaced(kLab, "    ends: [r, b]\n", ""), "  - name: r-b", "links[1].ends",
               "missing required field");
}

// ---- finish() on topologies built in code ----

TEST(TopologyFinish, BuildsIndicesAndIncidence) {
  Topology t = testing::TopologyBuilder("code")
                   .site("a")
                   .site("b")
                   .site("c", false)
                   .transit("r")
                   .link("a-r", "a", "r")
                   .link("r-b", "r", "b")
                   .link("r-c", "r", "c")
                   .build();
  EXPECT_EQ(t.find_site("b"), 1u);
  EXPECT_EQ(t.sites[1].node, 1u);
  EXPECT_EQ(t.nodes[1].site, 1u);
  EXPECT_EQ(t.nodes[3].site, kNone);
  EXPECT_EQ(t.find_link("r-c"), 2u);
  EXPECT_EQ(t.find_gateway("gw-b"), 1u);
  EXPECT_EQ(t.nodes[3].links, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(t.gateway_at_node(2), kNone);
  ASSERT_NE(t.gateways[0].port_on_link(0), nullptr);
  EXPECT_NE(t.gateways[0].peer_via("p-a-r", 1), nullptr);

  // finish() is idempotent: it rebuilds, it does not append.
  ASSERT_TRUE(finish(t).has_value());
  EXPECT_EQ(t.nodes[3].links, (std::vector<uint32_t>{0, 1, 2}));
}

TEST(TopologyFinish, ReservableShareRoundsDown) {
  model::Link link;
  link.capacity_bps = 1'000'000'000;
  link.slot_count = 100;
  link.reservable = 0.457;  // 45.7 slots: 45 may be reserved, not 46
  EXPECT_EQ(link.reservable_slots(), 45u);
  EXPECT_EQ(link.reservable_bps(), 457'000'000u);
  link.reservable = 0.29;  // 0.29 * 100 is 28.999999999999996 in binary floating point
  EXPECT_EQ(link.reservable_slots(), 29u);
  link.reservable = 1.0;
  EXPECT_EQ(link.reservable_slots(), 100u);
  EXPECT_EQ(link.reservable_bps(), 1'000'000'000u);
}

Topology small() {
  return testing::TopologyBuilder("code")
      .site("a")
      .site("b")
      .transit("r")
      .link("a-r", "a", "r")
      .link("r-b", "r", "b")
      .build();
}

void expect_finish_error(Topology t, const std::string& words) {
  const auto ok = finish(t);
  ASSERT_FALSE(ok.has_value()) << "finish() accepted it";
  EXPECT_EQ(ok.error().code, common::ErrorCode::kConfig);
  EXPECT_NE(ok.error().message.find(words), std::string::npos) << ok.error().message;
}

TEST(TopologyFinish, RefusesInconsistentTopologies) {
  {
    Topology t = small();
    t.nodes[2].name = "a";
    expect_finish_error(t, "node 'a' is named twice");
  }
  {
    Topology t = small();
    t.links[1].name = "a-r";
    expect_finish_error(t, "link 'a-r' is named twice");
  }
  {
    Topology t = small();
    t.links[0].ends[1] = 17;
    expect_finish_error(t, "link 'a-r': an end is not a node");
  }
  {
    Topology t = small();
    t.links[0].ends[1] = t.links[0].ends[0];
    expect_finish_error(t, "link 'a-r' joins a node to itself");
  }
  {
    Topology t = small();
    t.links[0].cycle_ns = 1'000'001;
    expect_finish_error(t, "link 'a-r': cycle must be a positive multiple of slots");
  }
  {
    Topology t = small();
    t.links[0].guard_ns = 10'000;  // = the 10 us slot
    expect_finish_error(t, "link 'a-r': guard must be shorter than a slot");
  }
  {
    Topology t = small();
    t.links[0].reservable = 1.5;
    expect_finish_error(t, "reservable must be in (0, 1]");
  }
  {
    Topology t = small();
    t.links[1].loss = 1.0;
    expect_finish_error(t, "link 'r-b': loss must be in [0, 1)");
  }
  {
    Topology t = small();
    t.gateways[1].peers[0].port = "wan9";
    expect_finish_error(t, "which is not one of its ports");
  }
  {
    Topology t = small();
    t.gateways[0].ports.clear();
    t.gateways[0].peers.clear();
    expect_finish_error(t, "link 'a-r' ends at site 'a', but gateway 'gw-a' has no port on it");
  }
  {
    Topology t = small();
    t.gateways[0].ports[0].link = 1;  // r-b does not end at a
    expect_finish_error(t, "does not end at site 'a'");
  }
  {
    Topology t = small();
    t.sites[0].tunnel_prefixes = {*common::parse_ip_prefix("10.0.0.0/8")};
    t.sites[1].tunnel_prefixes = {*common::parse_ip_prefix("10.9.0.0/16")};
    expect_finish_error(
        t, "sites 'a' and 'b' have overlapping tunnel prefixes 10.0.0.0/8 and 10.9.0.0/16");
  }
  {
    Topology t = small();
    t.sites[1].tunnel_prefixes = {*common::parse_ip_prefix("10.0.0.0/8"),
                                  *common::parse_ip_prefix("10.0.0.0/8")};
    expect_finish_error(t, "site 'b': tunnel prefixes 10.0.0.0/8 and 10.0.0.0/8 overlap");
  }
  {
    Topology t = small();
    t.gateways[1].site = 0;  // site a's gateway is gw-a
    expect_finish_error(t, "gateway 'gw-b' names site 'a', whose gateway is another one");
  }
  {
    Topology t = small();
    t.gateways[1].peers[0].gateway = 1;  // itself
    expect_finish_error(t, "must name another gateway");
  }
  {
    Topology t = small();
    t.sites.push_back(Site{"ghost", kNone, kNone, {}});
    expect_finish_error(t, "site 'ghost' has no node");
  }
}

}  // namespace
}  // namespace detwan::control::model
