// Verbs channel setup and teardown (the datapath is channel_datapath.cc).
#include "transport/verbs/channel.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/verbs/bootstrap.h"

namespace detwan::transport::verbs {

using common::ErrorCode;
using common::UniqueFd;

namespace {

// The bootstrap socket is the idle peer-death detector: keepalive probes every
// keepalive_interval_ns (whole seconds), TCP_USER_TIMEOUT = peer_timeout_ns -> ETIMEDOUT.
void apply_keepalive(int fd, const ChannelOptions& options) {
  const int interval_s = static_cast<int>(
      std::clamp<int64_t>((options.keepalive_interval_ns + 999'999'999) / 1'000'000'000, 1, 32767));
  const int timeout_ms =
      static_cast<int>(std::clamp<int64_t>(options.peer_timeout_ns / 1'000'000, 1, INT32_MAX));
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &interval_s, sizeof(interval_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof(timeout_ms));
}

}  // namespace

Result<std::unique_ptr<Channel>> make_channel(std::shared_ptr<Device> device, UniqueFd bootstrap,
                                              const ChannelOptions& options, int64_t timeout_ns) {
  apply_keepalive(bootstrap.get(), options);
  auto qp = create_queue_pair(*device, kSendDepth, kRecvSlots);
  if (!qp) return std::unexpected(qp.error());
  auto send_pool = register_pool(device->pd.get(), kSendChunks, kChunkBytes, 0);
  if (!send_pool) return std::unexpected(send_pool.error());
  auto recv_pool = register_pool(device->pd.get(), kRecvSlots, kChunkBytes, IBV_ACCESS_LOCAL_WRITE);
  if (!recv_pool) return std::unexpected(recv_pool.error());
  if (auto init = to_init(qp->qp.get()); !init) return std::unexpected(init.error());
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return common::make_error(ErrorCode::kIo,
                              fmt::format("verbs: eventfd failed: {}", std::strerror(errno)));
  }

  QpInfo local;
  local.qpn = qp->qp->qp_num;
  local.psn = std::random_device{}() & 0xffffff;  // PSNs are 24 bits
  local.lid = device->port.lid;
  std::memcpy(local.gid.data(), device->gid.raw, local.gid.size());
  local.max_message_bytes = static_cast<uint64_t>(std::max<int64_t>(options.max_message_bytes, 0));
  local.recv_slots = kRecvSlots;

  const int fd = bootstrap.get();
  auto channel = std::make_shared<ChannelCore>(std::move(device), std::move(*qp),
                                               std::move(*send_pool), std::move(*recv_pool),
                                               std::move(bootstrap), std::move(wake), options);
  if (auto posted = channel->post_all_receives(); !posted) return std::unexpected(posted.error());
  auto peer = exchange_qp_info(fd, local, timeout_ns);
  if (!peer) return std::unexpected(peer.error());
  if (auto started = channel->connect_and_start(local.psn, *peer); !started) {
    return std::unexpected(started.error());
  }
  return std::make_unique<VerbsChannel>(std::move(channel));
}

ChannelCore::ChannelCore(std::shared_ptr<Device> device, QueuePair qp, ChunkPool send_pool,
                         ChunkPool recv_pool, UniqueFd bootstrap, UniqueFd wake,
                         const ChannelOptions& options)
    : device_(std::move(device)),
      send_pool_(std::move(send_pool)),
      recv_pool_(std::move(recv_pool)),
      qp_(std::move(qp)),
      bootstrap_(std::move(bootstrap)),
      wake_(std::move(wake)),
      recv_limit_bytes_(static_cast<uint64_t>(std::max<int64_t>(options.max_message_bytes, 0))) {
  for (uint32_t i = 0; i < kSendChunks; ++i) free_chunks_.push_back(static_cast<int32_t>(i));
}

Result<void> ChannelCore::post_all_receives() {
  for (uint32_t i = 0; i < kRecvSlots; ++i) {
    if (!post_recv_st(i)) return std::unexpected(*error_);
  }
  return {};
}

Result<void> ChannelCore::connect_and_start(uint32_t local_psn, const QpInfo& peer) {
  if (auto rts = to_rts(qp_.qp.get(), *device_, local_psn, peer); !rts) return rts;
  send_limit_bytes_ = std::min(recv_limit_bytes_, peer.max_message_bytes);
  credits_ = std::min(peer.recv_slots, kSendDepth);
  description_ = fmt::format("verbs qpn {} -> qpn {}", qp_.qp->qp_num, peer.qpn);
  thread_ = std::thread([self = shared_from_this()] { self->run_st(); });
  return {};
}

void ChannelCore::shutdown() {
  close();
  // The close runs before the stop is seen: posted ops run before the loop re-checks stop_.
  post([this] { stop_.store(true, std::memory_order_release); });
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // called from a callback: the thread's reference keeps us alive
  } else {
    thread_.join();
  }
}

ChannelCore::~ChannelCore() {
  if (qp_.qp) to_error(qp_.qp.get());
}

void ChannelCore::post(std::function<void()> op) {
  // The queue is never closed: the channel's thread runs until its stop op.
  (void)ops_.post(op);
}

void ChannelCore::wake() noexcept {
  const uint64_t one = 1;
  (void)::write(wake_.get(), &one, sizeof(one));
}

}  // namespace detwan::transport::verbs
