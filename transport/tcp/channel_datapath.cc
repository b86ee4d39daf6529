// The tcp channel's progress-thread side: framing, ordered delivery, failure propagation.
// Functions ending in _st run only on the endpoint's progress thread (the io_context thread);
// the public TcpChannel calls post to them. No exceptions escape: asio is used with
// error_code overloads, allocation failure of a message body fails the channel.
#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <new>
#include <optional>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "common/byte_order.h"
#include "transport/stream_counters.h"
#include "transport/tcp/channel.h"
#include "transport/tcp/wire.h"

namespace detwan::transport::tcp {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr size_t kDefaultWindowBytes = size_t{4} << 20;
// A body buffer starts at most this big and doubles as bytes arrive, so a peer announcing a
// huge message commits memory only in proportion to what it actually sends.
constexpr size_t kInitialBodyBytes = size_t{16} << 20;

Error socket_error(const error_code& ec, const std::string& description) {
  namespace errc = asio::error;
  if (ec == errc::eof || ec == errc::connection_reset || ec == errc::broken_pipe ||
      ec == errc::connection_aborted || ec == errc::not_connected) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("{}: peer closed the connection ({})", description, ec.message())};
  }
  if (ec == errc::timed_out) {
    return Error{ErrorCode::kTimeout,
                 fmt::format("{}: peer stopped answering (TCP_USER_TIMEOUT: {})", description,
                             ec.message())};
  }
  return Error{ErrorCode::kIo, fmt::format("{}: socket error: {}", description, ec.message())};
}

}  // namespace

class ChannelCore : public std::enable_shared_from_this<ChannelCore> {
 public:
  ChannelCore(asio::ip::tcp::socket socket, const ChannelOptions& options,
              uint64_t peer_max_message_bytes)
      : socket_(std::move(socket)),
        recv_limit_bytes_(static_cast<uint64_t>(std::max<int64_t>(options.max_message_bytes, 0))),
        send_limit_bytes_(std::min(recv_limit_bytes_, peer_max_message_bytes)),
        window_bytes_(options.recv_window_bytes > 0 ? static_cast<size_t>(options.recv_window_bytes)
                                                    : kDefaultWindowBytes) {
    error_code ec;
    const auto local = socket_.local_endpoint(ec);
    const auto remote = socket_.remote_endpoint(ec);
    description_ = fmt::format("tcp {}:{} -> {}:{}", local.address().to_string(), local.port(),
                               remote.address().to_string(), remote.port());
  }

  [[nodiscard]] const std::string& description() const { return description_; }

  void start_st() { read_header_st(); }

  void send_st(std::span<const std::byte> message, SendCallback done) {
    if (error_) return done(std::unexpected(*error_));
    if (message.size() > send_limit_bytes_) {
      return done(common::make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: message of {} bytes exceeds max_message_bytes {} (local or peer's)",
                      description_, message.size(), send_limit_bytes_)));
    }
    PendingSend& send = sends_.emplace_back();
    send.message = message;
    send.done = std::move(done);
    common::store_be64(send.header.data(), message.size());
    if (!writing_) write_next_st();
  }

  void recv_st(RecvCallback done) {
    if (!ready_.empty()) {
      deliver_one_st(std::move(done));
      resume_reading_st();
      return;
    }
    if (error_) return done(std::unexpected(*error_));
    recvs_.push_back(std::move(done));
  }

  void close_st() {
    if (!error_) {
      fail_st(Error{ErrorCode::kUnavailable, description_ + ": channel closed locally"}, false);
    }
  }

  [[nodiscard]] ChannelStats stats() const {
    return counters_.snapshot();
  }

 private:
  struct PendingSend {
    std::span<const std::byte> message;
    SendCallback done;
    std::array<std::byte, kFrameHeaderBytes> header{};
  };

  // Writes the front message straight from the caller's span (zero copy). Completion means
  // written to the socket: TCP gives no end-to-end ack, that is this backend's semantics.
  void write_next_st() {
    if (sends_.empty() || error_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    PendingSend& send = sends_.front();  // deque: stays put while later sends are queued
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(send.header),
                                                    asio::buffer(send.message)};
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, size_t) {
      self->on_written_st(ec);
    });
  }

  void on_written_st(const error_code& ec) {
    if (error_) return;  // closed/failed meanwhile: the callback already ran with the error
    if (ec) return fail_st(socket_error(ec, description_), false);
    PendingSend send = std::move(sends_.front());
    sends_.pop_front();
    counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_sent.fetch_add(send.message.size(), std::memory_order_relaxed);
    send.done({});
    write_next_st();
  }

  void read_header_st() {
    reading_ = true;
    asio::async_read(socket_, asio::buffer(header_in_),
                     [self = shared_from_this()](error_code ec, size_t) {
                       self->on_header_st(ec);
                     });
  }

  void on_header_st(const error_code& ec) {
    if (error_) return;
    // EOF exactly between frames is a graceful close: keep what was received for recv_async.
    if (ec) return fail_st(socket_error(ec, description_), ec == asio::error::eof);
    body_length_ = common::load_be64(header_in_.data());
    if (body_length_ > recv_limit_bytes_) {
      counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
      return fail_st(Error{ErrorCode::kIo,
                           fmt::format("{}: peer sent a message of {} bytes, above "
                                       "max_message_bytes {}",
                                       description_, body_length_, recv_limit_bytes_)},
                     false);
    }
    body_received_ = 0;
    body_ = std::vector<std::byte>();
    read_body_st();
  }

  void read_body_st() {
    if (body_received_ == body_length_) return on_message_st();
    if (body_received_ == body_.size()) {
      const size_t target = std::min<uint64_t>(
          body_length_, std::max(kInitialBodyBytes, body_.size() * 2));
      try {
        body_.resize(target);
      } catch (const std::bad_alloc&) {
        return fail_st(Error{ErrorCode::kIo, fmt::format("{}: cannot allocate {} bytes for a "
                                                         "received message",
                                                         description_, target)},
                       false);
      }
    }
    asio::async_read(socket_,
                     asio::buffer(body_.data() + body_received_, body_.size() - body_received_),
                     [self = shared_from_this()](error_code ec, size_t n) {
                       if (self->error_) return;
                       if (ec) return self->fail_st(socket_error(ec, self->description_), false);
                       self->body_received_ += n;
                       self->read_body_st();
                     });
  }

  void on_message_st() {
    counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_received.fetch_add(body_length_, std::memory_order_relaxed);
    ready_bytes_ += body_.size();
    ready_.push_back(std::move(body_));
    body_ = std::vector<std::byte>();
    while (!ready_.empty() && !recvs_.empty()) {
      RecvCallback done = std::move(recvs_.front());
      recvs_.pop_front();
      deliver_one_st(std::move(done));
    }
    reading_ = false;
    resume_reading_st();
  }

  void deliver_one_st(RecvCallback done) {
    std::vector<std::byte> message = std::move(ready_.front());
    ready_.pop_front();
    ready_bytes_ -= message.size();
    done(std::move(message));
  }

  // Reading pauses while the unclaimed messages exceed the window (TCP then pushes back).
  void resume_reading_st() {
    if (!reading_ && !error_ && ready_bytes_ <= window_bytes_) read_header_st();
  }

  // The channel fails once: pending sends and receives complete with `error`, the socket is
  // shut down. `keep_received`: complete messages already received stay deliverable.
  void fail_st(Error error, bool keep_received) {
    if (error_) return;
    error_ = std::move(error);
    error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    std::deque<PendingSend> sends = std::exchange(sends_, {});
    std::deque<RecvCallback> recvs = std::exchange(recvs_, {});
    body_ = std::vector<std::byte>();
    if (!keep_received) {
      ready_.clear();
      ready_bytes_ = 0;
    }
    for (PendingSend& send : sends) send.done(std::unexpected(*error_));
    for (RecvCallback& done : recvs) {
      if (!ready_.empty()) {
        deliver_one_st(std::move(done));
      } else {
        done(std::unexpected(*error_));
      }
    }
  }

  asio::ip::tcp::socket socket_;
  std::string description_;
  const uint64_t recv_limit_bytes_;
  const uint64_t send_limit_bytes_;
  const size_t window_bytes_;

  std::deque<PendingSend> sends_;
  bool writing_ = false;

  std::array<std::byte, kFrameHeaderBytes> header_in_{};
  uint64_t body_length_ = 0;
  uint64_t body_received_ = 0;
  std::vector<std::byte> body_;
  bool reading_ = false;
  std::deque<std::vector<std::byte>> ready_;
  size_t ready_bytes_ = 0;
  std::deque<RecvCallback> recvs_;

  std::optional<Error> error_;

  StreamCounters counters_;
};

TcpChannel::TcpChannel(std::shared_ptr<IoThread> io, asio::ip::tcp::socket socket,
                       const ChannelOptions& options, uint64_t peer_max_message_bytes)
    : io_(std::move(io)),
      core_(std::make_shared<ChannelCore>(std::move(socket), options, peer_max_message_bytes)) {
  asio::post(io_->context(), [core = core_] { core->start_st(); });
}

TcpChannel::~TcpChannel() { close(); }

void TcpChannel::send_async(std::span<const std::byte> message, SendCallback done) {
  asio::post(io_->context(), [core = core_, message, done = std::move(done)]() mutable {
    core->send_st(message, std::move(done));
  });
}

void TcpChannel::recv_async(RecvCallback done) {
  asio::post(io_->context(),
             [core = core_, done = std::move(done)]() mutable { core->recv_st(std::move(done)); });
}

ChannelStats TcpChannel::stats() const { return core_->stats(); }

void TcpChannel::close() {
  asio::post(io_->context(), [core = core_] { core->close_st(); });
}

std::string TcpChannel::describe() const { return core_->description(); }

}  // namespace detwan::transport::tcp
