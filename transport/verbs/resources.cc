#include "transport/verbs/resources.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace detwan::transport::verbs {
namespace {

using common::ErrorCode;

// ibverbs calls return either NULL + errno or an errno value directly.
std::unexpected<common::Error> verbs_error(const char* call, int error) {
  return common::make_error(error == ENODEV ? ErrorCode::kUnavailable : ErrorCode::kIo,
                            fmt::format("verbs: {} failed: {} (errno {})", call,
                                        std::strerror(error), error));
}

}  // namespace

Result<std::shared_ptr<Device>> open_first_device() {
  int count = 0;
  std::unique_ptr<ibv_device*, void (*)(ibv_device**)> list(ibv_get_device_list(&count),
                                                            ibv_free_device_list);
  if (!list || count == 0) {
    return common::make_error(ErrorCode::kUnavailable,
                              "no RDMA device (ibv_get_device_list found 0 devices)");
  }
  auto device = std::make_shared<Device>();
  device->context.reset(ibv_open_device(list.get()[0]));
  if (!device->context) return verbs_error("ibv_open_device", errno);
  device->pd.reset(ibv_alloc_pd(device->context.get()));
  if (!device->pd) return verbs_error("ibv_alloc_pd", errno);
  if (int rc = ibv_query_port(device->context.get(), kPortNum, &device->port); rc != 0) {
    return verbs_error("ibv_query_port", rc);
  }
  if (int rc = ibv_query_gid(device->context.get(), kPortNum, kGidIndex, &device->gid); rc != 0) {
    return verbs_error("ibv_query_gid", rc);
  }
  return device;
}

Result<ChunkPool> register_pool(ibv_pd* pd, size_t count, size_t chunk_bytes, int access) {
  ChunkPool pool;
  pool.chunk_bytes = chunk_bytes;
  pool.memory.resize(count * chunk_bytes);
  pool.mr.reset(ibv_reg_mr(pd, pool.memory.data(), pool.memory.size(), access));
  if (!pool.mr) return verbs_error("ibv_reg_mr", errno);
  return pool;
}

Result<QueuePair> create_queue_pair(Device& device, uint32_t send_depth, uint32_t recv_depth) {
  QueuePair out;
  out.events.reset(ibv_create_comp_channel(device.context.get()));
  if (!out.events) return verbs_error("ibv_create_comp_channel", errno);
  out.cq.reset(ibv_create_cq(device.context.get(), static_cast<int>(send_depth + recv_depth),
                             nullptr, out.events.get(), 0));
  if (!out.cq) return verbs_error("ibv_create_cq", errno);
  if (int rc = ibv_req_notify_cq(out.cq.get(), 0); rc != 0) {
    return verbs_error("ibv_req_notify_cq", rc);
  }
  ibv_qp_init_attr attr{};
  attr.send_cq = out.cq.get();
  attr.recv_cq = out.cq.get();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = send_depth;
  attr.cap.max_recv_wr = recv_depth;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  out.qp.reset(ibv_create_qp(device.pd.get(), &attr));
  if (!out.qp) return verbs_error("ibv_create_qp", errno);
  return out;
}

Result<void> to_init(ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = kPortNum;
  attr.qp_access_flags = 0;  // two-sided SEND/RECV only: no remote access
  const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
    return verbs_error("ibv_modify_qp(INIT)", rc);
  }
  return {};
}

Result<void> to_rts(ibv_qp* qp, const Device& device, uint32_t local_psn, const QpInfo& remote) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = device.port.active_mtu;
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;  // 0.64 ms; credits make RNR exceptional anyway
  attr.ah_attr.dlid = remote.lid;
  attr.ah_attr.port_num = kPortNum;
  // RoCE (Ethernet link layer) addresses by GID; InfiniBand by LID (GRH optional).
  if (device.port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
    attr.ah_attr.grh.sgid_index = kGidIndex;
    attr.ah_attr.grh.hop_limit = 64;
  }
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
    return verbs_error("ibv_modify_qp(RTR)", rc);
  }

  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;   // 4.096 us x 2^14 = 67 ms per try
  attr.retry_cnt = 7;  // -> ~0.5 s without an ACK: IBV_WC_RETRY_EXC_ERR (kTimeout)
  attr.rnr_retry = 7;  // infinite: a receiver momentarily out of buffers is waited for
  attr.sq_psn = local_psn;
  attr.max_rd_atomic = 1;
  mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
         IBV_QP_MAX_QP_RD_ATOMIC;
  if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
    return verbs_error("ibv_modify_qp(RTS)", rc);
  }
  return {};
}

void to_error(ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

}  // namespace detwan::transport::verbs
