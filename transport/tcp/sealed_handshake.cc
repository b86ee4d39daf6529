#include "transport/tcp/sealed_handshake.h"

#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "common/byte_order.h"
#include "transport/tcp/socket_options.h"

namespace detwan::transport::tcp {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

constexpr size_t kSealedHelloBytes = kHelloBytes + kSealedHelloExtraBytes;
using SealedHello = std::array<std::byte, kSealedHelloBytes>;

class SealedHandshakeOp : public std::enable_shared_from_this<SealedHandshakeOp> {
 public:
  SealedHandshakeOp(asio::ip::tcp::socket socket, const ChannelOptions& options, std::string peer,
                    std::shared_ptr<TcpKeyring> keyring, bool client, HandshakeDone done)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        options_(options),
        peer_(std::move(peer)),
        keyring_(std::move(keyring)),
        client_(client),
        done_(std::move(done)) {}

  void start(int64_t timeout_ns) {
    timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(timeout_ns, 0)));
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->finished_) return;
      self->finish(common::make_error(
          ErrorCode::kTimeout,
          fmt::format("tcp: no authenticated connection with {} within the timeout (a peer "
                      "without this key, or none, looks the same)",
                      self->peer_)));
    });
    if (!crypto::random_bytes(own_nonce_)) {
      return finish(common::make_error(ErrorCode::kInternal, "tcp: RAND_bytes failed"));
    }
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
                          self->send_hello(nullptr, [self] { self->read_prefix(); });
                        });
  }

  void serve() { read_prefix(); }

 private:
  // Writes this side's sealed hello (MAC bound to `client_nonce` on the server), then `next`.
  template <typename Next>
  void send_hello(const crypto::Nonce* client_nonce, Next next) {
    encode_sealed_hello_prefix(
        static_cast<uint64_t>(std::max<int64_t>(options_.max_message_bytes, 0)),
        std::span<std::byte, kHelloBytes>(out_.data(), kHelloBytes));
    out_[kHelloBytes] = std::byte{static_cast<uint8_t>(keyring_->mode())};
    std::memcpy(out_.data() + kHelloBytes + 1, own_nonce_.data(), kNonceBytes);
    crypto::Tag mac{};
    if (!keyring_->mac(std::span(out_).first(kSealedHelloBytes - kMacBytes), client_nonce, mac)) {
      return finish(common::make_error(ErrorCode::kInternal, "tcp: HMAC failed"));
    }
    std::memcpy(out_.data() + kSealedHelloBytes - kMacBytes, mac.data(), kMacBytes);
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), next](error_code ec, size_t) {
                        if (self->finished_) return;
                        if (ec) return self->fail(ec, "sending hello to");
                        next();
                      });
  }

  void read_prefix() {
    asio::async_read(socket_, asio::buffer(in_.data(), kHelloBytes),
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (self->finished_) return;
                       if (ec) return self->fail(ec, "waiting for the hello of");
                       self->on_prefix();
                     });
  }

  void on_prefix() {
    const auto prefix = std::span<const std::byte, kHelloBytes>(in_.data(), kHelloBytes);
    if (!is_sealed_hello(prefix)) {
      auto plain = decode_hello(prefix, peer_);
      Error error{ErrorCode::kInvalidArgument,
                  plain ? fmt::format("tcp: security mode mismatch: {} runs unauthenticated "
                                      "channels (Security::none()) and this endpoint '{}': give "
                                      "both ends the same mode and key",
                                      peer_, to_string(keyring_->mode()))
                        : plain.error().message};
      if (!client_ && plain) {
        // Tell the plain client what it met (the prefix of a sealed hello), then give up.
        encode_sealed_hello_prefix(0, std::span<std::byte, kHelloBytes>(out_.data(), kHelloBytes));
        asio::async_write(socket_, asio::buffer(out_.data(), kHelloBytes),
                          [self = shared_from_this(), error](error_code, size_t) {
                            if (!self->finished_) self->finish(std::unexpected(error));
                          });
        return;
      }
      return finish(std::unexpected(error));
    }
    asio::async_read(socket_, asio::buffer(in_.data() + kHelloBytes, kSealedHelloExtraBytes),
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (self->finished_) return;
                       if (ec) return self->fail(ec, "waiting for the hello of");
                       self->on_hello();
                     });
  }

  void on_hello() {
    crypto::Nonce peer_nonce{};
    std::memcpy(peer_nonce.data(), in_.data() + kHelloBytes + 1, kNonceBytes);
    crypto::Tag mac{};
    const std::span<const std::byte> signed_bytes(in_.data(), kSealedHelloBytes - kMacBytes);
    const std::span<const std::byte> their_mac(in_.data() + kSealedHelloBytes - kMacBytes,
                                               kMacBytes);
    if (!keyring_->mac(signed_bytes, client_ ? &own_nonce_ : nullptr, mac) ||
        !crypto::equal_ct(mac, their_mac)) {
      return finish(common::make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("tcp: {} did not prove the key (its hello's MAC does not verify: another "
                      "key or context, or not a detwan endpoint)",
                      peer_)));
    }
    const auto peer_mode = static_cast<SecurityMode>(std::to_integer<uint8_t>(in_[kHelloBytes]));
    Hello hello;
    hello.version = kSealedProtocolVersion;
    hello.max_message_bytes = common::load_be64(in_.data() + 8);
    hello.mode = keyring_->mode();
    const crypto::Nonce& client_nonce = client_ ? own_nonce_ : peer_nonce;
    const crypto::Nonce& server_nonce = client_ ? peer_nonce : own_nonce_;
    auto keys = keyring_->derive(client_nonce, server_nonce);
    if (!keys) return finish(std::unexpected(keys.error()));
    hello.tx_key = client_ ? keys->first : keys->second;
    hello.rx_key = client_ ? keys->second : keys->first;
    Error mismatch{
        ErrorCode::kInvalidArgument,
        fmt::format("tcp: security mode mismatch: {} runs '{}', this endpoint '{}'", peer_,
                    std::to_integer<uint8_t>(in_[kHelloBytes]) <= 2 ? to_string(peer_mode)
                                                                    : std::string_view("unknown"),
                    to_string(keyring_->mode()))};
    const bool mode_ok = peer_mode == keyring_->mode();
    if (client_) {
      if (!mode_ok) return finish(std::unexpected(mismatch));
      return finish(hello);
    }
    // Server: answer a keyed client (also one of another mode, so it sees the mismatch).
    client_nonce_ = peer_nonce;
    send_hello(&client_nonce_, [self = shared_from_this(), hello, mode_ok, mismatch] {
      if (!mode_ok) return self->finish(std::unexpected(mismatch));
      self->finish(hello);
    });
  }

  void fail(const error_code& ec, const char* what) {
    const bool refused_or_closed = ec == asio::error::connection_refused ||
                                   ec == asio::error::eof || ec == asio::error::connection_reset;
    finish(common::make_error(refused_or_closed ? ErrorCode::kUnavailable : ErrorCode::kIo,
                              fmt::format("tcp: {} {}: {}", what, peer_, ec.message())));
  }

  void finish(Result<Hello> result) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    HandshakeDone done = std::move(done_);
    done(std::move(result), std::move(socket_));
  }

  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  ChannelOptions options_;
  std::string peer_;
  std::shared_ptr<TcpKeyring> keyring_;
  const bool client_;
  HandshakeDone done_;
  crypto::Nonce own_nonce_{};
  crypto::Nonce client_nonce_{};
  SealedHello out_{};
  SealedHello in_{};
  bool finished_ = false;
};

}  // namespace

TcpKeyring::TcpKeyring(Security security, crypto::HmacKey key)
    : security_(std::move(security)), hello_key_(std::move(key)) {}

Result<std::shared_ptr<TcpKeyring>> TcpKeyring::create(const Security& security) {
  if (security.mode == SecurityMode::kNone || !security.has_key) {
    return common::make_error(
        ErrorCode::kConfig,
        fmt::format("tcp: transport security: mode '{}' needs the job's key and none was given: "
                    "set EndpointOptions::security = Security::keyed(key, mode, context) (tools: "
                    "--key-file PATH), or ask for unauthenticated channels by name with "
                    "Security::none() (tools: --insecure)",
                    to_string(security.mode)));
  }
  std::vector<std::byte> info;
  const auto label = bytes_of("handshake");
  info.insert(info.end(), label.begin(), label.end());
  const auto context = bytes_of(security.context);
  info.insert(info.end(), context.begin(), context.end());
  crypto::Key hello{};
  if (auto ok = crypto::hkdf_sha256(security.key, bytes_of("detwan-tcp-v2"), info, hello); !ok) {
    return std::unexpected(ok.error());
  }
  auto hmac = crypto::HmacKey::create(hello);
  if (!hmac) return std::unexpected(hmac.error());
  return std::shared_ptr<TcpKeyring>(new TcpKeyring(security, std::move(*hmac)));
}

bool TcpKeyring::mac(std::span<const std::byte> bytes, const crypto::Nonce* client_nonce,
                     crypto::Tag& out) {
  const std::span<const std::byte> parts[3] = {
      bytes_of(client_nonce == nullptr ? "tcp-hello" : "tcp-hello-ack"), bytes,
      client_nonce == nullptr ? std::span<const std::byte>()
                              : std::span<const std::byte>(*client_nonce)};
  return hello_key_.mac(parts, out);
}

Result<std::pair<crypto::Key, crypto::Key>> TcpKeyring::derive(
    const crypto::Nonce& client_nonce, const crypto::Nonce& server_nonce) const {
  std::array<std::byte, 2 * kNonceBytes> salt{};
  std::memcpy(salt.data(), client_nonce.data(), kNonceBytes);
  std::memcpy(salt.data() + kNonceBytes, server_nonce.data(), kNonceBytes);
  std::pair<crypto::Key, crypto::Key> keys;
  for (const bool c2s : {true, false}) {
    std::vector<std::byte> info;
    const auto label = bytes_of(c2s ? "tcp-c2s" : "tcp-s2c");
    info.insert(info.end(), label.begin(), label.end());
    info.push_back(std::byte{static_cast<uint8_t>(security_.mode)});
    const auto context = bytes_of(security_.context);
    info.insert(info.end(), context.begin(), context.end());
    auto ok = crypto::hkdf_sha256(security_.key, salt, info, c2s ? keys.first : keys.second);
    if (!ok) return std::unexpected(ok.error());
  }
  return keys;
}

void start_sealed_client_handshake(asio::ip::tcp::socket socket,
                                   asio::ip::tcp::resolver::results_type targets,
                                   const ChannelOptions& options, int64_t timeout_ns,
                                   std::string peer_name, std::shared_ptr<TcpKeyring> keyring,
                                   HandshakeDone done) {
  auto op = std::make_shared<SealedHandshakeOp>(std::move(socket), options, std::move(peer_name),
                                                std::move(keyring), true, std::move(done));
  op->start(timeout_ns);
  op->connect(targets);
}

void start_sealed_server_handshake(asio::ip::tcp::socket socket, const ChannelOptions& options,
                                   int64_t timeout_ns, std::shared_ptr<TcpKeyring> keyring,
                                   HandshakeDone done) {
  error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  std::string peer = ec ? std::string("unknown peer")
                        : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  auto op = std::make_shared<SealedHandshakeOp>(std::move(socket), options, std::move(peer),
                                                std::move(keyring), false, std::move(done));
  op->start(timeout_ns);
  op->serve();
}

}  // namespace detwan::transport::tcp
