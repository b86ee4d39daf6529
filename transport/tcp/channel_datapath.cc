// The tcp channel's progress-thread side: framing, ordered delivery, failure propagation.
// Functions ending in _st run only on the endpoint's progress thread (the io_context thread);
// the public TcpChannel calls post to them. No exceptions escape: asio is used with
// error_code overloads, allocation failure of a message body fails the channel.
#include <algorithm>
#include <array>
#include <cstring>
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
#include "transport/crypto/crypto.h"
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
  ChannelCore(asio::ip::tcp::socket socket, const ChannelOptions& options, const Hello& hello)
      : socket_(std::move(socket)),
        recv_limit_bytes_(static_cast<uint64_t>(std::max<int64_t>(options.max_message_bytes, 0))),
        send_limit_bytes_(std::min(recv_limit_bytes_, hello.max_message_bytes)),
        window_bytes_(options.recv_window_bytes > 0 ? static_cast<size_t>(options.recv_window_bytes)
                                                    : kDefaultWindowBytes),
        mode_(hello.mode) {
    error_code ec;
    const auto local = socket_.local_endpoint(ec);
    const auto remote = socket_.remote_endpoint(ec);
    description_ = fmt::format("tcp {}:{} -> {}:{}", local.address().to_string(), local.port(),
                               remote.address().to_string(), remote.port());
    if (mode_ == SecurityMode::kNone) return;
    auto tx = crypto::PacketCipher::create(hello.tx_key);
    auto rx = crypto::PacketCipher::create(hello.rx_key);
    if (tx && rx) {
      tx_.emplace(std::move(*tx));
      rx_.emplace(std::move(*rx));
      if (mode_ == SecurityMode::kEncrypt) tx_scratch_.resize(kMaxRecordBytes);
    } else {
      setup_error_ = (!tx ? tx.error() : rx.error()).message;
    }
  }

  [[nodiscard]] const std::string& description() const { return description_; }

  void start_st() {
    if (!setup_error_.empty()) {
      return fail_st(Error{ErrorCode::kInternal, description_ + ": " + setup_error_}, false);
    }
    read_header_st();
  }

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
    bool length_sent = false;  // sealed: the length record is out
    uint64_t offset = 0;       // sealed: message bytes sent in records
  };

  [[nodiscard]] bool sealed() const { return mode_ != SecurityMode::kNone; }

  Error auth_error() const {
    return Error{ErrorCode::kIo,
                 fmt::format("{}: a record failed authentication (tampered with, or not from the "
                             "keyed peer): channel closed",
                             description_)};
  }

  // ---- sealed records (wire.h): the front message's next record ----

  void write_record_st() {
    PendingSend& send = sends_.front();
    const std::span<const std::byte> payload =
        !send.length_sent
            ? std::span<const std::byte>(send.header)
            : send.message.subspan(send.offset, std::min<uint64_t>(kMaxRecordBytes,
                                                                  send.message.size() - send.offset));
    common::store_be32(record_out_.data(), static_cast<uint32_t>(payload.size()));
    std::span<const std::byte> on_wire = payload;
    bool ok = false;
    if (mode_ == SecurityMode::kEncrypt) {
      const std::span<std::byte> text = std::span(tx_scratch_).first(payload.size());
      if (!payload.empty()) std::memcpy(text.data(), payload.data(), payload.size());
      ok = tx_->seal(tx_records_, {}, text, tag_out_);
      on_wire = text;
    } else {
      ok = tx_->seal(tx_records_, payload, {}, tag_out_);  // the tag covers the payload in clear
    }
    if (!ok) return fail_st(Error{ErrorCode::kInternal, description_ + ": aes-256-gcm failed"}, false);
    ++tx_records_;
    last_record_bytes_ = payload.size();
    const std::array<asio::const_buffer, 3> buffers{
        asio::buffer(record_out_), asio::buffer(on_wire.data(), on_wire.size()),
        asio::buffer(tag_out_)};
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, size_t) {
      self->on_record_written_st(ec);
    });
  }

  void on_record_written_st(const error_code& ec) {
    if (error_) return;
    if (ec) return fail_st(socket_error(ec, description_), false);
    PendingSend& send = sends_.front();
    if (!send.length_sent) {
      send.length_sent = true;
    } else {
      send.offset += last_record_bytes_;
    }
    if (send.offset < send.message.size()) return write_record_st();
    on_written_st(ec);
  }

  void read_record_header_st() {
    asio::async_read(socket_, asio::buffer(record_in_),
                     [self = shared_from_this()](error_code ec, size_t) {
                       self->on_record_header_st(ec);
                     });
  }

  void on_record_header_st(const error_code& ec) {
    if (error_) return;
    // EOF exactly between messages is a graceful close.
    if (ec) return fail_st(socket_error(ec, description_), ec == asio::error::eof && awaiting_length_);
    const uint32_t len = common::load_be32(record_in_.data());
    if (awaiting_length_) {
      if (len != kFrameHeaderBytes) return malformed_st("a message's first record is not its length");
      const std::array<asio::mutable_buffer, 2> buffers{asio::buffer(header_in_),
                                                        asio::buffer(tag_in_)};
      asio::async_read(socket_, buffers, [self = shared_from_this()](error_code e, size_t) {
        self->on_length_record_st(e);
      });
      return;
    }
    const uint64_t expected = std::min<uint64_t>(kMaxRecordBytes, body_length_ - body_received_);
    if (len != expected) return malformed_st("a record of the wrong length");
    if (!grow_body_st(body_received_ + len)) return;
    const std::array<asio::mutable_buffer, 2> buffers{
        asio::buffer(body_.data() + body_received_, len), asio::buffer(tag_in_)};
    asio::async_read(socket_, buffers, [self = shared_from_this(), len](error_code e, size_t) {
      self->on_data_record_st(e, len);
    });
  }

  // Checks (and decrypts in place) a received record.
  bool open_record_st(std::span<std::byte> payload) {
    const bool ok = mode_ == SecurityMode::kEncrypt
                        ? rx_->open(rx_records_, {}, payload, payload, tag_in_)
                        : rx_->open(rx_records_, payload, {}, {}, tag_in_);
    if (!ok) {
      counters_.dropped_auth.fetch_add(1, std::memory_order_relaxed);
      fail_st(auth_error(), false);
      return false;
    }
    ++rx_records_;
    return true;
  }

  void on_length_record_st(const error_code& ec) {
    if (error_) return;
    if (ec) return fail_st(socket_error(ec, description_), false);
    if (!open_record_st(header_in_)) return;
    awaiting_length_ = false;
    if (!start_body_st()) return;
    if (body_length_ == 0) {
      awaiting_length_ = true;
      return on_message_st();
    }
    read_record_header_st();
  }

  void on_data_record_st(const error_code& ec, uint32_t len) {
    if (error_) return;
    if (ec) return fail_st(socket_error(ec, description_), false);
    if (!open_record_st(std::span(body_.data() + body_received_, len))) return;
    body_received_ += len;
    if (body_received_ < body_length_) return read_record_header_st();
    awaiting_length_ = true;
    on_message_st();
  }

  void malformed_st(const char* what) {
    counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    fail_st(Error{ErrorCode::kIo, fmt::format("{}: peer sent {}", description_, what)}, false);
  }

  // Writes the front message straight from the caller's span (zero copy). Completion means
  // written to the socket: TCP gives no end-to-end ack, that is this backend's semantics.
  void write_next_st() {
    if (sends_.empty() || error_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    if (sealed()) return write_record_st();
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
    if (sealed()) return read_record_header_st();
    asio::async_read(socket_, asio::buffer(header_in_),
                     [self = shared_from_this()](error_code ec, size_t) {
                       self->on_header_st(ec);
                     });
  }

  void on_header_st(const error_code& ec) {
    if (error_) return;
    // EOF exactly between frames is a graceful close: keep what was received for recv_async.
    if (ec) return fail_st(socket_error(ec, description_), ec == asio::error::eof);
    if (!start_body_st()) return;
    read_body_st();
  }

  // A message's length is known (header_in_): checks it against the limit and starts its body.
  bool start_body_st() {
    body_length_ = common::load_be64(header_in_.data());
    if (body_length_ > recv_limit_bytes_) {
      counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
      fail_st(Error{ErrorCode::kIo,
                    fmt::format("{}: peer sent a message of {} bytes, above max_message_bytes {}",
                                description_, body_length_, recv_limit_bytes_)},
              false);
      return false;
    }
    body_received_ = 0;
    body_ = std::vector<std::byte>();
    return true;
  }

  // The body buffer holds at least `needed` bytes: it starts at most kInitialBodyBytes and
  // doubles as bytes arrive. False (the channel failed) if memory runs out.
  bool grow_body_st(uint64_t needed) {
    if (needed <= body_.size()) return true;
    const size_t target = std::min<uint64_t>(
        body_length_, std::max<uint64_t>({needed, kInitialBodyBytes, body_.size() * 2}));
    try {
      body_.resize(target);
    } catch (const std::bad_alloc&) {
      fail_st(Error{ErrorCode::kIo, fmt::format("{}: cannot allocate {} bytes for a received "
                                                "message",
                                                description_, target)},
              false);
      return false;
    }
    return true;
  }

  void read_body_st() {
    if (body_received_ == body_length_) return on_message_st();
    if (body_received_ == body_.size() && !grow_body_st(body_received_ + 1)) return;
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

  // Authenticated channels (wire.h: records); unused with SecurityMode::kNone.
  const SecurityMode mode_;
  std::optional<crypto::PacketCipher> tx_;
  std::optional<crypto::PacketCipher> rx_;
  std::string setup_error_;
  uint64_t tx_records_ = 0;  // the nonce of the next record sent / received
  uint64_t rx_records_ = 0;
  std::vector<std::byte> tx_scratch_;  // kEncrypt: a record's ciphertext
  std::array<std::byte, kRecordHeaderBytes> record_out_{};
  std::array<std::byte, kRecordTagBytes> tag_out_{};
  size_t last_record_bytes_ = 0;
  std::array<std::byte, kRecordHeaderBytes> record_in_{};
  std::array<std::byte, kRecordTagBytes> tag_in_{};
  bool awaiting_length_ = true;

  StreamCounters counters_;
};

TcpChannel::TcpChannel(std::shared_ptr<IoThread> io, asio::ip::tcp::socket socket,
                       const ChannelOptions& options, const Hello& hello)
    : io_(std::move(io)),
      core_(std::make_shared<ChannelCore>(std::move(socket), options, hello)) {
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
