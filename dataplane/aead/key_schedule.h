#pragma once
// The tunnel key schedule (docs/wire-format.md, "Key schedule"): the keys that seal a tunnel's
// packets are never the configured secret itself but HKDF-SHA256 (RFC 5869, OpenSSL's EVP_KDF
// "HKDF") of it, bound to the tunnel, to the direction and to the gateways' session epochs:
//
//   salt = "detwan tunnel keys v1"  (21 ASCII bytes)
//   ikm  = the tunnel secret (32 bytes, the configured key or the agent's reservation key)
//   info = purpose (4 ASCII bytes: "ctl " or "data") | tunnel id (4) |
//          sender's epoch (8) | receiver's epoch (8; 0 for "ctl ")   all big-endian
//   K_ctl(X)      = HKDF(..., info("ctl ", tunnel, E_X, 0))    seals X's control packets
//   K_data(X->Y)  = HKDF(..., info("data", tunnel, E_X, E_Y))  seals X's data packets to Y
//
// The sender's epoch comes first, so the two directions of a tunnel never share a key (the
// gateways refuse a peer epoch equal to their own), a reflected packet never opens, and every
// restart of either gateway changes every data key of its tunnels.
//
// KeyDeriver owns one HKDF context (setup: create() may allocate). derive() allocates nothing of
// ours (OpenSSL may, inside HKDF) and never throws: the engine calls it when a peer's epoch
// changes, not per packet.
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "dataplane/aead/aead.h"

namespace detwan::dataplane::aead {

enum class KeyPurpose : uint8_t { kControl = 0, kData = 1 };

// The HKDF inputs, exactly as derive() passes them (tests check the layout against RFC 5869).
inline constexpr char kKeyScheduleSalt[] = "detwan tunnel keys v1";
inline constexpr std::size_t kKeyScheduleInfoBytes = 4 + 4 + 8 + 8;
using KeyScheduleInfo = std::array<std::byte, kKeyScheduleInfoBytes>;
[[nodiscard]] KeyScheduleInfo key_schedule_info(KeyPurpose purpose, uint32_t tunnel_id,
                                                uint64_t sender_epoch,
                                                uint64_t receiver_epoch) noexcept;

class KeyDeriver {
 public:
  // kConfig naming OpenSSL's complaint if HKDF is not available.
  static common::Result<KeyDeriver> create();
  KeyDeriver(KeyDeriver&&) noexcept;
  KeyDeriver& operator=(KeyDeriver&&) noexcept;
  ~KeyDeriver();

  // *out = HKDF(secret, info(purpose, tunnel_id, sender_epoch, receiver_epoch)). False only if
  // OpenSSL fails (*out is then zeroed).
  bool derive(const Key& secret, KeyPurpose purpose, uint32_t tunnel_id, uint64_t sender_epoch,
              uint64_t receiver_epoch, Key* out) noexcept;

 private:
  struct Context;
  explicit KeyDeriver(std::unique_ptr<Context> context) noexcept;
  std::unique_ptr<Context> context_;
};

}  // namespace detwan::dataplane::aead
