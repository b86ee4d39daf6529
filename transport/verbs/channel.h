#pragma once
// A verbs channel: messages over one ibverbs RC queue pair (two-sided SEND/RECV).
//
//   framing   a message is [u64 length][bytes] cut into chunks of kChunkBytes; every chunk is
//             one IBV_WR_SEND_WITH_IMM copied from a registered send pool (no per-message
//             memory registration); the receiver copies chunks into an owned vector.
//   credits   each side pre-posts kRecvSlots receive buffers and tells the peer in the
//             bootstrap; a send consumes one credit, the receiver returns credits in the
//             immediate data of its own sends (or of a zero-length credit-only send once
//             kRecvSlots/4 are owed). One credit is reserved for credit-only sends so two
//             busy sides can never both be stuck at zero. The sender therefore never
//             overruns the receiver's posted buffers (no RNR in normal operation).
//   progress  one thread per channel sleeps in poll() on the CQ's completion channel, an
//             eventfd (posted API calls) and the bootstrap TCP socket (peer close/death).
//   errors    a failed work completion fails the channel: IBV_WC_RETRY_EXC_ERR (the peer's
//             HCA stopped acknowledging) -> kTimeout; bootstrap EOF -> kUnavailable; others
//             -> kIo naming ibv_wc_status_str. Send completion = the peer's HCA acknowledged
//             every chunk (RC), i.e. the data is in the peer's receive buffers.
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/post_queue.h"
#include "common/unique_fd.h"
#include "transport/stream_counters.h"
#include "transport/transport.h"
#include "transport/verbs/resources.h"

namespace detwan::transport::verbs {

inline constexpr size_t kChunkBytes = size_t{64} << 10;
inline constexpr uint32_t kRecvSlots = 64;
inline constexpr uint32_t kSendChunks = 32;
inline constexpr uint32_t kSendDepth = kRecvSlots + 8;

// Creates a channel over a connected bootstrap socket: QP, pools, QP info exchange, RTS.
Result<std::unique_ptr<Channel>> make_channel(std::shared_ptr<Device> device,
                                              common::UniqueFd bootstrap,
                                              const ChannelOptions& options, int64_t timeout_ns);

// The channel's state and progress thread. Shared by the Channel facade and the thread, so a
// channel destroyed from inside its own callback (on the progress thread) stays valid until
// the thread has unwound.
class ChannelCore : public std::enable_shared_from_this<ChannelCore> {
 public:
  ChannelCore(std::shared_ptr<Device> device, QueuePair qp, ChunkPool send_pool,
              ChunkPool recv_pool, common::UniqueFd bootstrap, common::UniqueFd wake,
              const ChannelOptions& options);
  ~ChannelCore();
  ChannelCore(const ChannelCore&) = delete;
  ChannelCore& operator=(const ChannelCore&) = delete;

  void send_async(std::span<const std::byte> message, SendCallback done);
  void recv_async(RecvCallback done);
  [[nodiscard]] ChannelStats stats() const;
  void close();
  [[nodiscard]] const std::string& describe() const { return description_; }
  // Closes, stops the progress thread and waits for it (detaches if called on it).
  void shutdown();

  // Setup, in this order, before any other call: post every receive buffer (before the peer
  // can reach RTS and send), then connect the QP to the peer and start the progress thread.
  Result<void> post_all_receives();
  Result<void> connect_and_start(uint32_t local_psn, const QpInfo& peer);

 private:
  struct Outgoing {
    std::span<const std::byte> message;
    SendCallback done;
    size_t offset = 0;
    bool header_sent = false;
  };
  struct Posted {
    int32_t chunk = -1;  // -1: credit-only send without a buffer
    SendCallback done;   // set on a message's last chunk
    uint64_t message_bytes = 0;
  };

  void post(std::function<void()> op);
  void run_st();
  void drain_cq_st();
  void on_send_done_st();
  void on_recv_st(uint32_t chunk, const ibv_wc& wc);
  void deliver_st(std::vector<std::byte> message);
  void pump_st();
  bool post_send_st(int32_t chunk, size_t length);
  bool post_recv_st(uint32_t chunk);
  void fail_st(common::Error error, bool keep_received);
  void wake() noexcept;

  std::shared_ptr<Device> device_;  // first: ibverbs objects below die before the PD
  ChunkPool send_pool_;
  ChunkPool recv_pool_;
  QueuePair qp_;
  common::UniqueFd bootstrap_;
  common::UniqueFd wake_;
  const uint64_t recv_limit_bytes_;
  uint64_t send_limit_bytes_ = 0;  // set by connect_and_start, before the thread starts
  std::string description_;

  // Ops for the channel's thread; a post from another thread writes wake_.
  common::PostQueue<std::function<void()>> ops_{[this] { wake(); }};
  std::atomic<bool> stop_{false};
  std::thread thread_;

  // Progress thread only.
  uint32_t credits_ = 0;
  uint32_t owed_credits_ = 0;
  std::vector<int32_t> free_chunks_;
  std::deque<Outgoing> outgoing_;
  std::deque<Posted> posted_;
  std::vector<std::byte> body_;
  uint64_t body_filled_ = 0;
  bool assembling_ = false;
  std::deque<std::vector<std::byte>> ready_;
  std::deque<RecvCallback> recvs_;
  std::optional<common::Error> error_;

  StreamCounters counters_;
};

class VerbsChannel final : public Channel {
 public:
  explicit VerbsChannel(std::shared_ptr<ChannelCore> core) : core_(std::move(core)) {}
  ~VerbsChannel() override { core_->shutdown(); }

  void send_async(std::span<const std::byte> message, SendCallback done) override {
    core_->send_async(message, std::move(done));
  }
  void recv_async(RecvCallback done) override { core_->recv_async(std::move(done)); }
  [[nodiscard]] ChannelStats stats() const override { return core_->stats(); }
  void close() override { core_->close(); }
  [[nodiscard]] std::string describe() const override { return core_->describe(); }

 private:
  std::shared_ptr<ChannelCore> core_;
};

}  // namespace detwan::transport::verbs
