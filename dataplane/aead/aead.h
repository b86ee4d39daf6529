#pragma once
// Authenticated encryption of tunnel packets (docs/wire-format.md, "Authenticated tunnels"):
// AES-256-GCM (intel-ipsec-mb where built in, else OpenSSL 3) or ChaCha20-Poly1305 (OpenSSL 3)
// over the tunnel payload, with the 40-byte tunnel header as associated data and a 16-byte tag
// after the payload.
//
// AeadKey holds one 32-byte key, expanded once at create()/rekey() (setup tier: may allocate,
// returns errors); seal()/open() and the packet helpers are datapath functions: no allocation
// of ours, no exceptions, no logging. One AeadKey belongs to one thread.
//
// Nonce (12 bytes), unique per key as long as a sender's session number is (see the document):
//   session (4, from the header) | C<<7 | path id (1) | low 56 bits of the sequence number (7)
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace detwan::dataplane::aead {

enum class Cipher : uint8_t { kAes256Gcm = 1, kChacha20Poly1305 = 2 };
[[nodiscard]] std::string_view to_string(Cipher cipher) noexcept;  // "aes-256-gcm", ...
[[nodiscard]] std::optional<Cipher> cipher_from_string(std::string_view name) noexcept;

inline constexpr std::size_t kKeyBytes = 32;
inline constexpr std::size_t kTagBytes = 16;
inline constexpr std::size_t kNonceBytes = 12;
// A session may number packets up to here (the nonce holds 56 bits of the sequence number).
inline constexpr uint64_t kMaxSequence = (uint64_t{1} << 56) - 1;

using Key = std::array<std::byte, kKeyBytes>;
using Nonce = std::array<std::byte, kNonceBytes>;

// The nonce of a tunnel packet (layout above).
[[nodiscard]] Nonce packet_nonce(uint32_t session, bool control, uint8_t path_id,
                                 uint64_t sequence) noexcept;

// First 8 bytes of SHA-256(key) in hex: names a key in stats and logs without revealing it.
[[nodiscard]] std::string fingerprint(const Key& key);

// 64 hex digits -> key; nullopt on any other input.
[[nodiscard]] std::optional<Key> key_from_hex(std::string_view hex) noexcept;

// Which library seals and opens. kAuto: AES-256-GCM from intel-ipsec-mb's direct API where the
// library was built in (the key expanded once, no per-call dispatch: what DPDK's aesni_gcm PMD
// and VPP use), else OpenSSL 3's EVP; ChaCha20-Poly1305 always from OpenSSL. The others are for
// comparisons (tools/bench/gw-aead-cost) and tests; kIpsecMb with ChaCha20 or without the
// library is a kConfig error.
enum class Backend : uint8_t { kAuto, kOpenssl, kIpsecMb };
[[nodiscard]] std::string_view to_string(Backend backend) noexcept;  // "auto", "openssl", ...
[[nodiscard]] std::optional<Backend> backend_from_string(std::string_view name) noexcept;
// Was intel-ipsec-mb built in (and does its manager start on this CPU)?
[[nodiscard]] bool ipsec_mb_available() noexcept;

class AeadKey {
 public:
  // kConfig error naming OpenSSL's (or intel-ipsec-mb's) complaint if the cipher cannot be
  // set up.
  static common::Result<AeadKey> create(Cipher cipher, const Key& key,
                                        Backend backend = Backend::kAuto);
  AeadKey(AeadKey&&) noexcept;
  AeadKey& operator=(AeadKey&&) noexcept;
  ~AeadKey();

  [[nodiscard]] Cipher cipher() const noexcept { return cipher_; }
  // The library this key seals with: Backend::kOpenssl or Backend::kIpsecMb (never kAuto).
  [[nodiscard]] Backend backend() const noexcept;
  // Replaces the key in the existing contexts (same cipher): no allocation of ours, no
  // exceptions. False only if OpenSSL fails; the key is then unusable until a rekey succeeds.
  bool rekey(const Key& key) noexcept;

  // Encrypts `text` in place and writes the tag. False only if OpenSSL fails.
  bool seal(const Nonce& nonce, std::span<const std::byte> aad, std::span<std::byte> text,
            std::span<std::byte, kTagBytes> tag) noexcept;
  // Decrypts `text` in place if the tag matches nonce, aad and text; false otherwise. On
  // failure `text` holds garbage, unless `restore`: then it is the ciphertext again (both
  // ciphers are stream ciphers: running the same key stream over it once more undoes the
  // decryption), so another key can be tried.
  bool open(const Nonce& nonce, std::span<const std::byte> aad, std::span<std::byte> text,
            std::span<const std::byte, kTagBytes> tag, bool restore = false) noexcept;

 private:
  struct Contexts;
  AeadKey(Cipher cipher, std::unique_ptr<Contexts> contexts) noexcept;
  Cipher cipher_;
  std::unique_ptr<Contexts> contexts_;
};

// ---- whole tunnel packets (datapath) ----
// `frame` holds an encoded tunnel header with flag A and a session number, then plaintext_bytes
// of payload, then room for the tag. Sets payload_length to plaintext_bytes + kTagBytes,
// encrypts the payload and appends the tag. Returns the packet's size, 0 if it does not fit,
// the header lacks flag A, the sequence is above kMaxSequence or OpenSSL failed.
[[nodiscard]] std::size_t seal_packet(AeadKey& key, std::span<std::byte> frame,
                                      std::size_t plaintext_bytes) noexcept;
// `datagram` is a packet wire::decode() accepted, with flag A. Checks the tag and decrypts the
// payload in place: returns the plaintext bytes (payload - tag), or nullopt if the payload is
// shorter than a tag or the tag does not match (with `restore`, the datagram is then unchanged).
[[nodiscard]] std::optional<std::size_t> open_packet(AeadKey& key, std::span<std::byte> datagram,
                                                     bool restore = false) noexcept;

}  // namespace detwan::dataplane::aead
