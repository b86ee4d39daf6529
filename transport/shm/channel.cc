#include "transport/shm/channel.h"

namespace detwan::transport::shm {
namespace {

Error endpoint_closed() { return Error{ErrorCode::kUnavailable, "shm: endpoint closed"}; }

}  // namespace

ShmChannel::~ShmChannel() { close(); }

void ShmChannel::send_async(std::span<const std::byte> message, SendCallback done) {
  Op op{Op::Kind::kSend, state_, message, std::move(done), {}};
  if (!progress_->post(std::move(op))) op.send_done(std::unexpected(endpoint_closed()));
}

void ShmChannel::recv_async(RecvCallback done) {
  Op op{Op::Kind::kRecv, state_, {}, {}, std::move(done)};
  if (!progress_->post(std::move(op))) op.recv_done(std::unexpected(endpoint_closed()));
}

void ShmChannel::close() {
  Op op{Op::Kind::kClose, state_, {}, {}, {}};
  [[maybe_unused]] const bool posted = progress_->post(std::move(op));
}

}  // namespace detwan::transport::shm
