// Flow rules that steer WAN frames to their owner shard's RX queue (flow_steering.h).
#include "dataplane/dpdk/flow_steering.h"

#include <bit>
#include <cstring>

#include <fmt/format.h>
#include <rte_byteorder.h>
#include <rte_errno.h>

namespace detwan::dataplane::dpdk {
namespace {

void fill(ShardFlowRule& r, const gw::Endpoint& local, uint32_t shard, uint32_t shards) {
  r.queue = static_cast<uint16_t>(shard);
  r.value = static_cast<uint8_t>(shard);
  r.mask = static_cast<uint8_t>(shards - 1);
  r.attr.ingress = 1;

  rte_flow_item* item = r.pattern.data();
  *item++ = rte_flow_item{RTE_FLOW_ITEM_TYPE_ETH, nullptr, nullptr, nullptr};
  if (local.ipv6) {
    std::memcpy(r.ipv6_spec.hdr.dst_addr, local.address, 16);
    std::memset(r.ipv6_mask.hdr.dst_addr, 0xFF, 16);
    r.ipv6_spec.hdr.proto = IPPROTO_UDP;
    r.ipv6_mask.hdr.proto = 0xFF;
    *item++ = rte_flow_item{RTE_FLOW_ITEM_TYPE_IPV6, &r.ipv6_spec, nullptr, &r.ipv6_mask};
  } else {
    std::memcpy(&r.ipv4_spec.hdr.dst_addr, local.address, 4);  // network order already
    r.ipv4_mask.hdr.dst_addr = UINT32_MAX;
    r.ipv4_spec.hdr.next_proto_id = IPPROTO_UDP;
    r.ipv4_mask.hdr.next_proto_id = 0xFF;
    *item++ = rte_flow_item{RTE_FLOW_ITEM_TYPE_IPV4, &r.ipv4_spec, nullptr, &r.ipv4_mask};
  }
  r.udp_spec.hdr.dst_port = rte_cpu_to_be_16(local.port);
  r.udp_mask.hdr.dst_port = UINT16_MAX;
  *item++ = rte_flow_item{RTE_FLOW_ITEM_TYPE_UDP, &r.udp_spec, nullptr, &r.udp_mask};
  // One byte at a fixed offset after the UDP header: exact position, no search.
  r.raw_spec.relative = 1;
  r.raw_spec.search = 0;
  r.raw_spec.offset = kTunnelIdLowByteOffset;
  r.raw_spec.limit = 0;
  r.raw_spec.length = 1;
  r.raw_spec.pattern = &r.value;
  r.raw_mask.relative = 1;
  r.raw_mask.search = 1;
  r.raw_mask.offset = -1;  // every bit of the offset matters
  r.raw_mask.limit = UINT16_MAX;
  r.raw_mask.length = UINT16_MAX;
  r.raw_mask.pattern = &r.mask;
  *item++ = rte_flow_item{RTE_FLOW_ITEM_TYPE_RAW, &r.raw_spec, nullptr, &r.raw_mask};
  *item = rte_flow_item{RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr};

  r.action_queue.index = r.queue;
  r.actions[0] = rte_flow_action{RTE_FLOW_ACTION_TYPE_QUEUE, &r.action_queue};
  r.actions[1] = rte_flow_action{RTE_FLOW_ACTION_TYPE_END, nullptr};
}

// The device's reason and the errno text, once when they say the same.
std::string flow_error_text(const rte_flow_error& error, int status) {
  const std::string errno_text = rte_strerror(status < 0 ? -status : status);
  if (error.message == nullptr || errno_text == error.message) return errno_text;
  return fmt::format("{} ({})", error.message, errno_text);
}

}  // namespace

common::Result<std::vector<std::unique_ptr<ShardFlowRule>>> shard_flow_rules(
    const gw::Endpoint& local, uint32_t shards) {
  if (shards < 2 || shards > 256 || !std::has_single_bit(shards)) {
    return common::make_error(
        common::ErrorCode::kUnavailable,
        fmt::format("flow rules steer by the tunnel id's low bits: {} shards is not a power of "
                    "two from 2 to 256",
                    shards));
  }
  std::vector<std::unique_ptr<ShardFlowRule>> rules;
  for (uint32_t k = 0; k < shards; ++k) {
    rules.push_back(std::make_unique<ShardFlowRule>());
    fill(*rules.back(), local, k, shards);
  }
  return rules;
}

common::Result<std::unique_ptr<FlowSteering>> FlowSteering::install(uint16_t port_id,
                                                                    const std::string& label,
                                                                    const gw::Endpoint& local,
                                                                    uint32_t shards) {
  auto rules = shard_flow_rules(local, shards);
  if (!rules) {
    return common::make_error(rules.error().code,
                              fmt::format("{}: {}", label, rules.error().message));
  }
  std::unique_ptr<FlowSteering> steering(new FlowSteering(port_id));
  for (const auto& rule : *rules) {  // all validated before any is created
    rte_flow_error error{};
    const int status =
        rte_flow_validate(port_id, &rule->attr, rule->pattern.data(), rule->actions.data(), &error);
    if (status != 0) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("{}: the device refuses the flow rule of shard {}: {}",
                                            label, rule->queue, flow_error_text(error, status)));
    }
  }
  for (const auto& rule : *rules) {
    rte_flow_error error{};
    rte_flow* flow =
        rte_flow_create(port_id, &rule->attr, rule->pattern.data(), rule->actions.data(), &error);
    if (flow == nullptr) {  // the destructor removes the rules created so far
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("{}: creating the flow rule of shard {}: {}", label,
                                            rule->queue, flow_error_text(error, rte_errno)));
    }
    steering->flows_.push_back(flow);
  }
  return steering;
}

FlowSteering::~FlowSteering() {
  for (rte_flow* flow : flows_) {
    rte_flow_error error{};
    (void)rte_flow_destroy(port_id_, flow, &error);
  }
}

}  // namespace detwan::dataplane::dpdk
