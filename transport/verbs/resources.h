#pragma once
// RAII owners of the ibverbs objects of the verbs backend, and the RC queue pair's state
// machine (RESET -> INIT -> RTR -> RTS). Errors name the ibverbs call and errno.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <infiniband/verbs.h>

#include "common/status.h"

namespace detwan::transport::verbs {

using common::Result;

inline constexpr uint8_t kPortNum = 1;
inline constexpr int kGidIndex = 0;

// What each side tells the other over the bootstrap TCP connection.
struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  uint64_t max_message_bytes = 0;
  uint32_t recv_slots = 0;  // receive buffers pre-posted: the peer's initial send credits
};

// The opened device and protection domain, shared by an endpoint and its channels.
struct Device {
  std::unique_ptr<ibv_context, int (*)(ibv_context*)> context{nullptr, ibv_close_device};
  std::unique_ptr<ibv_pd, int (*)(ibv_pd*)> pd{nullptr, ibv_dealloc_pd};
  ibv_port_attr port{};
  ibv_gid gid{};
};

// Opens the first RDMA device. kUnavailable if there is none.
Result<std::shared_ptr<Device>> open_first_device();

// A registered buffer of `count` chunks of `chunk_bytes`.
struct ChunkPool {
  std::vector<std::byte> memory;
  std::unique_ptr<ibv_mr, int (*)(ibv_mr*)> mr{nullptr, ibv_dereg_mr};
  size_t chunk_bytes = 0;
  [[nodiscard]] std::byte* chunk(size_t index) { return memory.data() + index * chunk_bytes; }
};

Result<ChunkPool> register_pool(ibv_pd* pd, size_t count, size_t chunk_bytes, int access);

// Completion channel + CQ + RC QP of one channel.
struct QueuePair {
  std::unique_ptr<ibv_comp_channel, int (*)(ibv_comp_channel*)> events{nullptr,
                                                                      ibv_destroy_comp_channel};
  std::unique_ptr<ibv_cq, int (*)(ibv_cq*)> cq{nullptr, ibv_destroy_cq};
  std::unique_ptr<ibv_qp, int (*)(ibv_qp*)> qp{nullptr, ibv_destroy_qp};
};

Result<QueuePair> create_queue_pair(Device& device, uint32_t send_depth, uint32_t recv_depth);
// RESET -> INIT (receives may be posted from here on).
Result<void> to_init(ibv_qp* qp);
// INIT -> RTR -> RTS, connected to `remote`.
Result<void> to_rts(ibv_qp* qp, const Device& device, uint32_t local_psn, const QpInfo& remote);
// Moves the QP to ERR: every outstanding work request completes with a flush error.
void to_error(ibv_qp* qp);

}  // namespace detwan::transport::verbs
