#pragma once
// Private to the bootstrap: the bytes of its messages (docs/collectives.md, "The bootstrap
// protocol"). All integers big-endian. Decoders read bytes from anyone: each length is checked
// against its bound before it is used, and nothing larger than the input is allocated.
//
// TCP handshake, fixed sizes, in the clear (bootstrap_keys.h computes the proofs):
//   hello      joiner -> root  "DWBH" u8 2 | nonce_j (32)                                37 B
//   challenge  root -> joiner  "DWBC" u8 2 | nonce_r (32) | salt (16) | root proof (32)  85 B
//   proof      joiner -> root  "DWBP" u8 2 | joiner proof (32)                           37 B
// Then each side sends sealed frames only: u32 length | AES-256-GCM(payload), of
//   join    "DWBJ" u8 2 | i32 rank | i32 nranks | u32 blob length, blob
//   answer  "DWBA" u8 2 | u8 0 (ok) | u32 nranks | nranks x (u32 length, blob)
//           "DWBA" u8 2 | u8 1 (error) | u8 ErrorCode | u32 length, message
// A file store's record of one rank is a join payload followed by its HMAC (bootstrap_keys.h).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/crypto.h"
#include "collectives/types.h"

namespace detwan::collectives::bootstrap {

inline constexpr uint8_t kWireVersion = 2;
inline constexpr size_t kNonceBytes = 32;  // each side's fresh handshake nonce
inline constexpr size_t kSaltBytes = 16;   // the root's per-rendezvous salt (communicator key)
// Bounds of what a rank's blob (its site and endpoint addresses: tens of bytes) and a job may
// be: they bound every allocation a peer can cause.
inline constexpr uint32_t kMaxBlobBytes = 16u << 10;
inline constexpr int32_t kMaxRanks = 1 << 16;
inline constexpr uint32_t kMaxErrorMessageBytes = 4u << 10;

inline constexpr size_t kHelloBytes = 5 + kNonceBytes;
inline constexpr size_t kChallengeBytes = 5 + kNonceBytes + kSaltBytes + crypto::kMacBytes;
inline constexpr size_t kProofBytes = 5 + crypto::kMacBytes;
inline constexpr size_t kJoinHeaderBytes = 5 + 4 + 4 + 4;
inline constexpr size_t kMaxJoinPayloadBytes = kJoinHeaderBytes + kMaxBlobBytes;

using Nonce = std::array<std::byte, kNonceBytes>;
using Salt = std::array<std::byte, kSaltBytes>;

// The largest answer payload a rank of `nranks` accepts: every blob at its bound, or an error
// message at its bound, whichever is more. A length prefix beyond it is refused before any
// allocation.
[[nodiscard]] size_t max_answer_payload_bytes(int32_t nranks) noexcept;

struct Challenge {
  Nonce nonce{};
  Salt salt{};
  crypto::Mac proof{};
};

std::string encode_hello(const Nonce& nonce);
std::string encode_challenge(const Challenge& challenge);
std::string encode_proof(const crypto::Mac& proof);
// Exactly kHelloBytes / kChallengeBytes / kProofBytes with the right magic and version, else
// kInvalidArgument ("malformed hello: no magic").
Result<Nonce> decode_hello(std::string_view bytes);
Result<Challenge> decode_challenge(std::string_view bytes);
Result<crypto::Mac> decode_proof(std::string_view bytes);

struct Join {
  int32_t rank = -1;
  int32_t nranks = 0;
  std::string blob;
};
std::string encode_join(const Join& join);
// kInvalidArgument naming what is wrong ("no magic", "truncated", "version 7").
Result<Join> decode_join(std::string_view payload);

// error.message is cut to kMaxErrorMessageBytes.
std::string encode_answer_ok(const std::vector<std::string>& blobs);
std::string encode_answer_error(const Error& error);
// An ok answer's blobs (exactly `nranks` of them, else an error naming both counts), or the
// error the root sent.
Result<std::vector<std::string>> decode_answer(std::string_view payload, int32_t nranks);

// u32 length + payload; the length as its 4 bytes.
std::string frame(std::string_view payload);
std::string length_prefix(uint32_t length);
[[nodiscard]] uint32_t read_length_prefix(std::string_view four_bytes) noexcept;

}  // namespace detwan::collectives::bootstrap
