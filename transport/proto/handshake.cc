// The authenticated handshake and key schedule (handshake.h). Keyring::create and derive are
// setup work (once per endpoint, once per channel); the MACs and checks run per HELLO.
#include "transport/proto/handshake.h"

#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/byte_order.h"

namespace detwan::transport::proto {
namespace {

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

constexpr std::string_view kHandshakeSalt = "detwan-transport-v3";
constexpr std::string_view kHelloLabel = "hello";
constexpr std::string_view kHelloAckLabel = "hello-ack";

}  // namespace

Keyring::Keyring(Security security, crypto::HmacKey hello_key, crypto::PacketCipher scratch)
    : security_(std::move(security)),
      hello_key_(std::move(hello_key)),
      scratch_(std::move(scratch)) {}

Result<std::unique_ptr<Keyring>> Keyring::create(const Security& security) {
  if (security.mode != SecurityMode::kNone && !security.has_key) {
    return common::make_error(
        ErrorCode::kConfig,
        fmt::format("transport security: mode '{}' needs the job's key and none was given: set "
                    "EndpointOptions::security = Security::keyed(key, mode, context) (tools: "
                    "--key-file PATH), or ask for unauthenticated channels by name with "
                    "Security::none() (tools: --insecure)",
                    to_string(security.mode)));
  }
  if (security.mode != SecurityMode::kNone && security.mode != SecurityMode::kAuthenticate &&
      security.mode != SecurityMode::kEncrypt) {
    return common::make_error(ErrorCode::kConfig, fmt::format("transport security: unknown mode {}",
                                                              static_cast<int>(security.mode)));
  }
  crypto::Key hello{};
  std::vector<std::byte> info;
  const auto label = bytes_of("handshake");
  info.insert(info.end(), label.begin(), label.end());
  const auto context = bytes_of(security.context);
  info.insert(info.end(), context.begin(), context.end());
  // kNone: a keyring that only answers mode(); the key material is a dummy never used.
  if (auto ok = crypto::hkdf_sha256(security.key, bytes_of(kHandshakeSalt), info, hello); !ok) {
    return std::unexpected(ok.error());
  }
  auto hmac = crypto::HmacKey::create(hello);
  if (!hmac) return std::unexpected(hmac.error());
  auto scratch = crypto::PacketCipher::create();
  if (!scratch) return std::unexpected(scratch.error());
  return std::unique_ptr<Keyring>(new Keyring(security, std::move(*hmac), std::move(*scratch)));
}

bool Keyring::hello_mac(std::span<const std::byte> signed_bytes, const crypto::Nonce* client_nonce,
                        crypto::Tag& out) noexcept {
  const std::span<const std::byte> parts[3] = {
      bytes_of(client_nonce == nullptr ? kHelloLabel : kHelloAckLabel), signed_bytes,
      client_nonce == nullptr ? std::span<const std::byte>()
                              : std::span<const std::byte>(*client_nonce)};
  return hello_key_.mac(parts, out);
}

Result<SessionKeys> Keyring::derive(uint64_t connection_id, const crypto::Nonce& client_nonce,
                                    const crypto::Nonce& server_nonce) const {
  std::array<std::byte, 2 * crypto::kNonceBytes> salt{};
  std::memcpy(salt.data(), client_nonce.data(), crypto::kNonceBytes);
  std::memcpy(salt.data() + crypto::kNonceBytes, server_nonce.data(), crypto::kNonceBytes);
  SessionKeys keys;
  for (const bool c2s : {true, false}) {
    std::vector<std::byte> info;
    const auto label = bytes_of(c2s ? "c2s" : "s2c");
    info.insert(info.end(), label.begin(), label.end());
    std::array<std::byte, 9> id_mode{};
    common::store_be64(id_mode.data(), connection_id);
    id_mode[8] = std::byte{static_cast<uint8_t>(security_.mode)};
    info.insert(info.end(), id_mode.begin(), id_mode.end());
    const auto context = bytes_of(security_.context);
    info.insert(info.end(), context.begin(), context.end());
    auto ok = crypto::hkdf_sha256(security_.key, salt, info,
                                  c2s ? keys.client_to_server : keys.server_to_client);
    if (!ok) return std::unexpected(ok.error());
  }
  return keys;
}

Status check_hello(Keyring& keyring, std::span<const std::byte> datagram, wire::Header& h,
                   wire::SealedHelloBody& body) {
  if (wire::decode_header(datagram, h) != Status::kOk || h.short_form ||
      h.version != wire::kVersionSealed || h.type != wire::Type::kHello ||
      wire::decode_sealed_hello(datagram.subspan(wire::kHeaderBytes), body) != Status::kOk) {
    return Status::kMalformed;
  }
  crypto::Tag mac{};
  if (!keyring.hello_mac(datagram.first(datagram.size() - wire::kHandshakeMacBytes), nullptr,
                         mac) ||
      !crypto::equal_ct(mac, body.mac)) {
    return Status::kDropped;
  }
  return Status::kOk;
}

size_t write_hello_ack(Keyring& keyring, const wire::Header& hello_header,
                       const wire::HelloBody& own, const crypto::Nonce& client_nonce,
                       const crypto::Nonce& server_nonce, int64_t now_ns,
                       std::span<std::byte> out) {
  wire::Header h;
  h.type = wire::Type::kHelloAck;
  h.version = wire::kVersionSealed;
  h.path_id = hello_header.path_id;
  h.connection_id = hello_header.connection_id;
  h.tx_time_ns = now_ns;
  wire::SealedHelloBody body;
  body.hello = own;
  body.hello.version = wire::kVersionSealed;
  body.mode = static_cast<uint8_t>(keyring.mode());
  body.nonce = server_nonce;
  const size_t n = wire::encode_sealed_hello(h, body, out);
  if (n == 0) return 0;
  crypto::Tag mac{};
  if (!keyring.hello_mac(out.first(n - wire::kHandshakeMacBytes), &client_nonce, mac)) return 0;
  std::memcpy(out.data() + n - wire::kHandshakeMacBytes, mac.data(), mac.size());
  return n;
}

size_t write_mismatch_close(uint64_t connection_id, uint8_t path_id, int64_t now_ns,
                            std::span<std::byte> out) {
  wire::Header h;
  h.type = wire::Type::kClose;
  h.version = wire::kVersion;
  h.path_id = path_id;
  h.connection_id = connection_id;
  h.tx_time_ns = now_ns;
  return wire::encode_close(h, wire::CloseBody{wire::kCloseSecurityMismatch}, out);
}

bool opens_as_client(Keyring& keyring, const crypto::Key& client_to_server,
                     std::span<const std::byte> datagram) {
  wire::Header h;
  if (wire::decode_header(datagram, h) != Status::kOk) return false;
  if (!h.short_form && (h.version != wire::kVersionSealed || h.type == wire::Type::kHello ||
                        h.type == wire::Type::kHelloAck)) {
    return false;
  }
  const size_t header = wire::header_bytes(h);
  if (datagram.size() < header + wire::kTagBytes) return false;
  crypto::PacketCipher& cipher = keyring.scratch();
  if (!cipher.rekey(client_to_server)) return false;
  // The client's first sealed datagrams have small packet numbers: expanded from 0.
  const uint64_t pn = expand_packet_number(0, false, h.packet_number);
  const size_t text_bytes = datagram.size() - header - wire::kTagBytes;
  const auto tag = datagram.last<wire::kTagBytes>();
  if (keyring.mode() == SecurityMode::kAuthenticate) {
    return cipher.open(pn, datagram.first(datagram.size() - wire::kTagBytes), {}, {}, tag);
  }
  // kEncrypt: the plaintext is not needed, only the verdict; decrypt into a bounded buffer.
  std::array<std::byte, 65536> plain;
  if (text_bytes > plain.size()) return false;
  return cipher.open(pn, datagram.first(header), datagram.subspan(header, text_bytes),
                     std::span(plain).first(text_bytes), tag);
}

}  // namespace detwan::transport::proto
