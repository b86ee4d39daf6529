#pragma once
// The authenticated handshake of the tcp backend (transport/tcp/wire.h, docs/transport.md
// "Authenticated channels"): the client sends its sealed hello (mode, nonce_c, MAC); the server
// answers only one whose MAC verifies, with its mode, nonce_s and a MAC bound to both nonces;
// both derive per-direction keys:
//   K_hs      = HKDF-SHA256(key, salt "detwan-tcp-v2", info "handshake" | context)
//   K_c2s/s2c = HKDF-SHA256(key, salt nonce_c | nonce_s, info "tcp-c2s"/"tcp-s2c" | mode | context)
// A peer without the key learns nothing and gets no answer (the server closes). A plain peer
// gets a clear "security mode mismatch" (the server sends its 16-byte "DWT2" prefix first).
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "transport/crypto/crypto.h"
#include "transport/tcp/handshake.h"

namespace detwan::transport::tcp {

// The endpoint's handshake key and what derives channel keys. Progress thread only.
class TcpKeyring {
 public:
  // kConfig when the mode needs a key and none was given (the message says how to fix it).
  static Result<std::shared_ptr<TcpKeyring>> create(const Security& security);
  [[nodiscard]] SecurityMode mode() const { return security_.mode; }
  // MAC of a client hello (client_nonce == nullptr) or a server hello bound to client_nonce.
  bool mac(std::span<const std::byte> bytes, const crypto::Nonce* client_nonce, crypto::Tag& out);
  // Keys of a channel: (client to server, server to client).
  Result<std::pair<crypto::Key, crypto::Key>> derive(const crypto::Nonce& client_nonce,
                                                     const crypto::Nonce& server_nonce) const;

 private:
  TcpKeyring(Security security, crypto::HmacKey key);
  Security security_;
  crypto::HmacKey hello_key_;
};

// Like start_client_handshake / start_server_handshake, for an endpoint whose keyring is
// sealed. The Hello passed to `done` carries the mode and this side's keys. Errors:
// kInvalidArgument for a peer that does not prove the key, a mismatched mode or a plain peer
// (counted as rejected handshakes), the others as the plain handshake's.
void start_sealed_client_handshake(boost::asio::ip::tcp::socket socket,
                                   boost::asio::ip::tcp::resolver::results_type targets,
                                   const ChannelOptions& options, int64_t timeout_ns,
                                   std::string peer_name, std::shared_ptr<TcpKeyring> keyring,
                                   HandshakeDone done);
void start_sealed_server_handshake(boost::asio::ip::tcp::socket socket,
                                   const ChannelOptions& options, int64_t timeout_ns,
                                   std::shared_ptr<TcpKeyring> keyring, HandshakeDone done);

}  // namespace detwan::transport::tcp
