#pragma once
// Receive steering by flow rules (issue 17, item 2): each WAN frame goes to the RX queue of the
// shard that owns its tunnel, so no shard has to pass it on.
//
// A shard owns the tunnels whose id modulo the shard count N is its index (gw/shard.h). With N a
// power of two that is the tunnel id's low log2(N) bits -- one masked byte of the tunnel header
// -- so N rules, installed once at start, cover every tunnel, including those added at run time:
//
//   eth / ipv4 dst=A (ipv6 dst=A) / udp dst=P / raw {after UDP, byte 7, value k, mask N-1}
//     -> queue k
//
// (byte 7 of the tunnel header is the low byte of the big-endian tunnel id, wire/header.h).
// Whether a device takes such rules differs by device: rte_flow_validate() asks it. A device
// that refuses any of them (the vdevs here have no flow API; NICs differ in the raw patterns
// they match) keeps RSS and the software dispatch rings; the refusal is logged and reported in
// the backend's counters. Where the rules are in place the dispatch rings stay as the safety
// net (a frame on the wrong queue is still handed over).
//
// Setup tier: may allocate; errors name the device and the rule.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rte_flow.h>

#include "common/status.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::dpdk {

// Offset, from the start of the UDP payload, of the byte the rules match.
inline constexpr int32_t kTunnelIdLowByteOffset = 7;

// One rule: its pattern and action, with the storage they point into (not copyable or
// movable for that reason).
struct ShardFlowRule {
  ShardFlowRule() = default;
  ShardFlowRule(const ShardFlowRule&) = delete;
  ShardFlowRule& operator=(const ShardFlowRule&) = delete;

  uint16_t queue = 0;
  uint8_t value = 0;  // of the tunnel id's low byte, under `mask`
  uint8_t mask = 0;
  rte_flow_attr attr{};
  rte_flow_item_ipv4 ipv4_spec{}, ipv4_mask{};
  rte_flow_item_ipv6 ipv6_spec{}, ipv6_mask{};
  rte_flow_item_udp udp_spec{}, udp_mask{};
  rte_flow_item_raw raw_spec{}, raw_mask{};
  rte_flow_action_queue action_queue{};
  std::array<rte_flow_item, 5> pattern{};
  std::array<rte_flow_action, 2> actions{};
};

// The rules for frames to `local` (IP address and UDP port, host order) on a device whose RX
// queue k belongs to shard k of `shards`. kUnavailable (naming the count) unless shards is a
// power of two from 2 to 256: no one masked byte expresses "id mod 3".
common::Result<std::vector<std::unique_ptr<ShardFlowRule>>> shard_flow_rules(
    const gw::Endpoint& local, uint32_t shards);

// Rules installed on one device; destroyed with the object (before the device is closed).
class FlowSteering {
 public:
  // Validates every rule, then creates them; nothing stays installed on an error, which names
  // the device, the rule and the device's reason ("wan_ports[0] (wan0): the device refuses the
  // flow rule of shard 0: Function not implemented" on a device without a flow API; a device
  // with one adds its own reason: "<reason> (<errno text>)").
  static common::Result<std::unique_ptr<FlowSteering>> install(uint16_t port_id,
                                                               const std::string& label,
                                                               const gw::Endpoint& local,
                                                               uint32_t shards);
  ~FlowSteering();
  FlowSteering(const FlowSteering&) = delete;
  FlowSteering& operator=(const FlowSteering&) = delete;

  [[nodiscard]] uint32_t rule_count() const noexcept {
    return static_cast<uint32_t>(flows_.size());
  }

 private:
  explicit FlowSteering(uint16_t port_id) : port_id_(port_id) {}
  uint16_t port_id_;
  std::vector<rte_flow*> flows_;
};

}  // namespace detwan::dataplane::dpdk
