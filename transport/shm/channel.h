#pragma once
// The shm Channel handle (transport/transport.h contract). Every call posts to the endpoint's
// progress thread, which owns the ChannelState. Dropping the handle closes the channel.
// If the endpoint is already gone, calls complete at once, on the calling thread, with
// kUnavailable "shm: endpoint closed" (there is no progress thread left to run them).
#include <memory>
#include <string>

#include "transport/shm/channel_state.h"
#include "transport/shm/progress.h"
#include "transport/transport.h"

namespace detwan::transport::shm {

class ShmChannel final : public Channel {
 public:
  ShmChannel(std::shared_ptr<ChannelState> state, std::shared_ptr<Progress> progress)
      : state_(std::move(state)), progress_(std::move(progress)) {}
  ~ShmChannel() override;

  void send_async(std::span<const std::byte> message, SendCallback done) override;
  void recv_async(RecvCallback done) override;
  void recycle(std::vector<std::byte> buffer) override { state_->recycle(std::move(buffer)); }
  [[nodiscard]] ChannelStats stats() const override { return state_->stats(); }
  void close() override;
  [[nodiscard]] std::string describe() const override { return state_->description(); }

 private:
  std::shared_ptr<ChannelState> state_;
  std::shared_ptr<Progress> progress_;
};

}  // namespace detwan::transport::shm
