// The flow rules that steer WAN frames to their owner shard (dataplane/dpdk/flow_steering.h),
// checked without a device: what each rule matches, against the tunnel header the gateway
// really sends and the owner gw::shard_of_tunnel() really picks. (Whether a device takes the
// rules is the device's answer; on net_ring it refuses, gateway_shard_test.cc checks the
// fallback.)
#include "dataplane/dpdk/flow_steering.h"

#include <array>
#include <cstring>

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <netinet/in.h>

#include "dataplane/gw/shard.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::dpdk {
namespace {

using ::testing::HasSubstr;

gw::Endpoint endpoint_v4(const char* address, uint16_t port) {
  gw::Endpoint e;
  EXPECT_EQ(::inet_pton(AF_INET, address, e.address), 1);
  e.port = port;
  return e;
}

// The tunnel header of a data packet of `tunnel_id`, as the gateway encodes it.
std::array<std::byte, wire::kHeaderSize> header_of(uint32_t tunnel_id) {
  wire::TunnelHeader h;
  h.flags = wire::kFlagData;
  h.type = static_cast<uint8_t>(wire::DataType::kDatagram);
  h.tunnel_id = tunnel_id;
  h.payload_length = 100;
  h.tx_time_ns = 1;
  std::array<std::byte, wire::kHeaderSize> out{};
  EXPECT_EQ(wire::encode(h, out).status, wire::EncodeStatus::kOk);
  return out;
}

// What a rule's raw item matches in a UDP payload: its byte at the rule's offset, under the
// mask, equals the value.
bool raw_matches(const ShardFlowRule& rule, const std::array<std::byte, wire::kHeaderSize>& h) {
  const auto byte = std::to_integer<uint8_t>(h[static_cast<size_t>(rule.raw_spec.offset)]);
  return (byte & rule.raw_mask.pattern[0]) == (rule.raw_spec.pattern[0] & rule.raw_mask.pattern[0]);
}

TEST(FlowSteering, EachTunnelMatchesExactlyTheRuleOfItsOwnerShard) {
  for (const uint32_t shards : {2u, 4u, 8u, 64u}) {
    auto rules = shard_flow_rules(endpoint_v4("192.0.2.1", 4789), shards);
    ASSERT_TRUE(rules.has_value()) << rules.error().message;
    ASSERT_EQ(rules->size(), shards);
    for (const uint32_t id : {1u, 2u, 3u, 7u, 8u, 63u, 64u, 65u, 255u, 256u, 257u, 4096u + 5,
                              0x01020304u, 0xFFFFFFFFu}) {
      const auto header = header_of(id);
      uint32_t matched = 0;
      for (const auto& rule : *rules) {
        if (raw_matches(*rule, header)) {
          ++matched;
          EXPECT_EQ(rule->queue, gw::shard_of_tunnel(id, shards))
              << "tunnel " << id << " of " << shards << " shards";
          EXPECT_EQ(rule->action_queue.index, rule->queue);
        }
      }
      EXPECT_EQ(matched, 1u) << "tunnel " << id << " of " << shards << " shards";
    }
  }
}

TEST(FlowSteering, TheRuleMatchesTheWanPortsAddressAndPortAndOneFixedByte) {
  auto rules = shard_flow_rules(endpoint_v4("192.0.2.1", 4789), 4);
  ASSERT_TRUE(rules.has_value());
  const ShardFlowRule& r = *(*rules)[3];
  EXPECT_EQ(r.attr.ingress, 1u);
  ASSERT_EQ(r.pattern[0].type, RTE_FLOW_ITEM_TYPE_ETH);
  ASSERT_EQ(r.pattern[1].type, RTE_FLOW_ITEM_TYPE_IPV4);
  ASSERT_EQ(r.pattern[2].type, RTE_FLOW_ITEM_TYPE_UDP);
  ASSERT_EQ(r.pattern[3].type, RTE_FLOW_ITEM_TYPE_RAW);
  ASSERT_EQ(r.pattern[4].type, RTE_FLOW_ITEM_TYPE_END);
  const auto* ip = static_cast<const rte_flow_item_ipv4*>(r.pattern[1].spec);
  const auto* ip_mask = static_cast<const rte_flow_item_ipv4*>(r.pattern[1].mask);
  EXPECT_EQ(ip->hdr.dst_addr, htonl(0xC0000201u));  // 192.0.2.1
  EXPECT_EQ(ip_mask->hdr.dst_addr, UINT32_MAX);
  EXPECT_EQ(ip->hdr.next_proto_id, IPPROTO_UDP);
  const auto* udp = static_cast<const rte_flow_item_udp*>(r.pattern[2].spec);
  EXPECT_EQ(udp->hdr.dst_port, htons(4789));
  EXPECT_EQ(static_cast<const rte_flow_item_udp*>(r.pattern[2].mask)->hdr.dst_port, UINT16_MAX);
  const auto* raw = static_cast<const rte_flow_item_raw*>(r.pattern[3].spec);
  EXPECT_EQ(raw->relative, 1u);  // counted from the end of the UDP header
  EXPECT_EQ(raw->search, 0u);
  EXPECT_EQ(raw->offset, static_cast<int32_t>(wire::kTunnelIdOffset + 3));
  EXPECT_EQ(raw->length, 1u);
  EXPECT_EQ(raw->pattern[0], 3u);
  EXPECT_EQ(static_cast<const rte_flow_item_raw*>(r.pattern[3].mask)->pattern[0], 3u);
  ASSERT_EQ(r.actions[0].type, RTE_FLOW_ACTION_TYPE_QUEUE);
  EXPECT_EQ(static_cast<const rte_flow_action_queue*>(r.actions[0].conf)->index, 3u);
  EXPECT_EQ(r.actions[1].type, RTE_FLOW_ACTION_TYPE_END);
}

TEST(FlowSteering, Ipv6PortsMatchTheirSixteenByteAddress) {
  gw::Endpoint local;
  local.ipv6 = true;
  ASSERT_EQ(::inet_pton(AF_INET6, "2001:db8::7", local.address), 1);
  local.port = 9000;
  auto rules = shard_flow_rules(local, 2);
  ASSERT_TRUE(rules.has_value());
  const ShardFlowRule& r = *(*rules)[0];
  ASSERT_EQ(r.pattern[1].type, RTE_FLOW_ITEM_TYPE_IPV6);
  const auto* ip = static_cast<const rte_flow_item_ipv6*>(r.pattern[1].spec);
  EXPECT_EQ(std::memcmp(ip->hdr.dst_addr, local.address, 16), 0);
  EXPECT_EQ(ip->hdr.proto, IPPROTO_UDP);
}

TEST(FlowSteering, ShardCountsThatNoMaskedByteExpressesAreRefusedByName) {
  for (const uint32_t shards : {0u, 1u, 3u, 6u, 512u}) {
    auto rules = shard_flow_rules(endpoint_v4("192.0.2.1", 4789), shards);
    ASSERT_FALSE(rules.has_value()) << shards;
    EXPECT_THAT(rules.error().message,
                HasSubstr(std::to_string(shards) + " shards is not a power of two from 2 to 256"));
  }
}

}  // namespace
}  // namespace detwan::dataplane::dpdk
