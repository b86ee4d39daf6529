#include "transport/tcp/handshake.h"

#include <array>
#include <chrono>
#include <memory>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "transport/tcp/socket_options.h"

namespace detwan::transport::tcp {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

class HandshakeOp : public std::enable_shared_from_this<HandshakeOp> {
 public:
  HandshakeOp(asio::ip::tcp::socket socket, const ChannelOptions& options, std::string peer,
              HandshakeDone done)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        options_(options),
        peer_(std::move(peer)),
        done_(std::move(done)) {
    encode_hello(Hello{kProtocolVersion,
                       static_cast<uint64_t>(std::max<int64_t>(options.max_message_bytes, 0))},
                 hello_out_);
  }

  void start_deadline(int64_t timeout_ns) {
    timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(timeout_ns, 0)));
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->finished_) return;
      self->finish(common::make_error(
          ErrorCode::kTimeout, fmt::format("tcp: no connection with {} within the timeout "
                                           "(connect + hello)",
                                           self->peer_)));
    });
  }

  void connect(const asio::ip::tcp::resolver::results_type& targets) {
    asio::async_connect(socket_, targets,
                        [self = shared_from_this()](error_code ec, const asio::ip::tcp::endpoint&) {
                          if (self->finished_) return;
                          if (ec) return self->fail(ec, "connect to");
                          if (auto applied = apply_socket_options(self->socket_, self->options_);
                              !applied) {
                            return self->finish(std::unexpected(applied.error()));
                          }
                          self->exchange();
                        });
  }

  void exchange() {
    asio::async_write(socket_, asio::buffer(hello_out_),
                      [self = shared_from_this()](error_code ec, size_t) {
                        if (self->finished_) return;
                        if (ec) return self->fail(ec, "sending hello to");
                        self->written_ = true;
                        self->maybe_finish();
                      });
    asio::async_read(socket_, asio::buffer(hello_in_),
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (self->finished_) return;
                       if (ec) return self->fail(ec, "waiting for the hello of");
                       auto hello = decode_hello(self->hello_in_, self->peer_);
                       if (!hello) return self->finish(std::unexpected(hello.error()));
                       self->peer_hello_ = *hello;
                       self->maybe_finish();
                     });
  }

 private:
  void maybe_finish() {
    if (written_ && peer_hello_) finish(*peer_hello_);
  }

  void fail(const error_code& ec, const char* what) {
    const bool refused_or_closed = ec == asio::error::connection_refused ||
                                   ec == asio::error::eof ||
                                   ec == asio::error::connection_reset;
    finish(common::make_error(refused_or_closed ? ErrorCode::kUnavailable : ErrorCode::kIo,
                              fmt::format("tcp: {} {}: {}", what, peer_, ec.message())));
  }

  void finish(Result<Hello> result) {
    finished_ = true;
    timer_.cancel();
    // On failure the callee drops (closes) the socket, which aborts the other pending half of
    // the exchange; it can count the failure before the peer sees the connection go.
    HandshakeDone done = std::move(done_);
    done(std::move(result), std::move(socket_));
  }

  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  ChannelOptions options_;
  std::string peer_;
  HandshakeDone done_;
  std::array<std::byte, kHelloBytes> hello_out_{};
  std::array<std::byte, kHelloBytes> hello_in_{};
  bool written_ = false;
  std::optional<Hello> peer_hello_;
  bool finished_ = false;
};

}  // namespace

void start_client_handshake(asio::ip::tcp::socket socket,
                            asio::ip::tcp::resolver::results_type targets,
                            const ChannelOptions& options, int64_t timeout_ns,
                            std::string peer_name, HandshakeDone done) {
  auto op = std::make_shared<HandshakeOp>(std::move(socket), options, std::move(peer_name),
                                          std::move(done));
  op->start_deadline(timeout_ns);
  op->connect(targets);
}

void start_server_handshake(asio::ip::tcp::socket socket, const ChannelOptions& options,
                            int64_t timeout_ns, HandshakeDone done) {
  error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  std::string peer = ec ? std::string("unknown peer")
                        : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  auto op = std::make_shared<HandshakeOp>(std::move(socket), options, std::move(peer),
                                          std::move(done));
  op->start_deadline(timeout_ns);
  op->exchange();
}

}  // namespace detwan::transport::tcp
