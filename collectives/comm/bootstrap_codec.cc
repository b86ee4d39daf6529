#include "collectives/comm/bootstrap_codec.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/byte_order.h"

namespace detwan::collectives::bootstrap {
namespace {

// Byte codec over a string: big-endian integers, bounds-checked reads.
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { out_.append(length_prefix(v)); }
  void bytes(std::string_view v) { out_.append(v); }
  void bytes(std::span<const std::byte> v) { out_.append(crypto::view(v)); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool u8(uint8_t& v) {
    if (in_.size() < 1) return false;
    v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool u32(uint32_t& v) {
    if (in_.size() < 4) return false;
    v = read_length_prefix(in_);
    in_.remove_prefix(4);
    return true;
  }
  bool bytes(size_t n, std::string& v) {
    if (in_.size() < n) return false;
    v.assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  template <size_t N>
  bool bytes(std::array<std::byte, N>& v) {
    if (in_.size() < N) return false;
    std::memcpy(v.data(), in_.data(), N);
    in_.remove_prefix(N);
    return true;
  }
  [[nodiscard]] bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

constexpr std::string_view kHelloMagic = "DWBH";
constexpr std::string_view kChallengeMagic = "DWBC";
constexpr std::string_view kProofMagic = "DWBP";
constexpr std::string_view kJoinMagic = "DWBJ";
constexpr std::string_view kAnswerMagic = "DWBA";

std::unexpected<Error> malformed(std::string_view what, std::string_view why) {
  return make_error(ErrorCode::kInvalidArgument, fmt::format("malformed {}: {}", what, why));
}

void put_header(Writer& out, std::string_view magic) {
  out.bytes(magic);
  out.u8(kWireVersion);
}

Result<void> check_header(Reader& in, std::string_view magic, std::string_view what) {
  std::string got;
  if (!in.bytes(magic.size(), got) || got != magic) return malformed(what, "no magic");
  uint8_t version = 0;
  if (!in.u8(version)) return malformed(what, "truncated");
  if (version != kWireVersion) {
    return malformed(what, fmt::format("version {}, expected {}", version, kWireVersion));
  }
  return {};
}

// A fixed-size handshake message: header, then exactly the fields `read` consumes.
template <typename T, typename Read>
Result<T> decode_fixed(std::string_view bytes, size_t size, std::string_view magic,
                       std::string_view what, Read read) {
  if (bytes.size() != size) {
    return malformed(what, fmt::format("{} bytes, expected {}", bytes.size(), size));
  }
  Reader in(bytes);
  if (auto ok = check_header(in, magic, what); !ok) return std::unexpected(ok.error());
  T value{};
  if (!read(in, value) || !in.done()) return malformed(what, "truncated");
  return value;
}

}  // namespace

size_t max_answer_payload_bytes(int32_t nranks) noexcept {
  const size_t ranks = static_cast<size_t>(std::clamp(nranks, 0, kMaxRanks));
  const size_t ok = 5 + 1 + 4 + ranks * (4 + size_t{kMaxBlobBytes});
  const size_t error = 5 + 1 + 1 + 4 + size_t{kMaxErrorMessageBytes};
  return std::max(ok, error);
}

std::string encode_hello(const Nonce& nonce) {
  Writer out;
  put_header(out, kHelloMagic);
  out.bytes(nonce);
  return out.take();
}

std::string encode_challenge(const Challenge& challenge) {
  Writer out;
  put_header(out, kChallengeMagic);
  out.bytes(challenge.nonce);
  out.bytes(challenge.salt);
  out.bytes(challenge.proof);
  return out.take();
}

std::string encode_proof(const crypto::Mac& proof) {
  Writer out;
  put_header(out, kProofMagic);
  out.bytes(proof);
  return out.take();
}

Result<Nonce> decode_hello(std::string_view bytes) {
  return decode_fixed<Nonce>(bytes, kHelloBytes, kHelloMagic, "hello",
                             [](Reader& in, Nonce& v) { return in.bytes(v); });
}

Result<Challenge> decode_challenge(std::string_view bytes) {
  return decode_fixed<Challenge>(
      bytes, kChallengeBytes, kChallengeMagic, "challenge", [](Reader& in, Challenge& v) {
        return in.bytes(v.nonce) && in.bytes(v.salt) && in.bytes(v.proof);
      });
}

Result<crypto::Mac> decode_proof(std::string_view bytes) {
  return decode_fixed<crypto::Mac>(bytes, kProofBytes, kProofMagic, "proof",
                                   [](Reader& in, crypto::Mac& v) { return in.bytes(v); });
}

std::string encode_join(const Join& join) {
  Writer out;
  put_header(out, kJoinMagic);
  out.u32(static_cast<uint32_t>(join.rank));
  out.u32(static_cast<uint32_t>(join.nranks));
  out.u32(static_cast<uint32_t>(join.blob.size()));
  out.bytes(join.blob);
  return out.take();
}

Result<Join> decode_join(std::string_view payload) {
  Reader in(payload);
  if (auto ok = check_header(in, kJoinMagic, "join"); !ok) return std::unexpected(ok.error());
  Join join;
  uint32_t rank = 0;
  uint32_t nranks = 0;
  uint32_t blob_len = 0;
  if (!in.u32(rank) || !in.u32(nranks) || !in.u32(blob_len) || blob_len > kMaxBlobBytes ||
      !in.bytes(blob_len, join.blob) || !in.done()) {
    return malformed("join", "truncated or oversized");
  }
  join.rank = static_cast<int32_t>(rank);
  join.nranks = static_cast<int32_t>(nranks);
  return join;
}

std::string encode_answer_ok(const std::vector<std::string>& blobs) {
  Writer out;
  put_header(out, kAnswerMagic);
  out.u8(0);
  out.u32(static_cast<uint32_t>(blobs.size()));
  for (const auto& blob : blobs) {
    out.u32(static_cast<uint32_t>(blob.size()));
    out.bytes(blob);
  }
  return out.take();
}

std::string encode_answer_error(const Error& error) {
  const std::string_view message = std::string_view(error.message).substr(0, kMaxErrorMessageBytes);
  Writer out;
  put_header(out, kAnswerMagic);
  out.u8(1);
  out.u8(static_cast<uint8_t>(error.code));
  out.u32(static_cast<uint32_t>(message.size()));
  out.bytes(message);
  return out.take();
}

Result<std::vector<std::string>> decode_answer(std::string_view payload, int32_t nranks) {
  Reader in(payload);
  if (auto ok = check_header(in, kAnswerMagic, "answer"); !ok) return std::unexpected(ok.error());
  uint8_t status = 0;
  if (!in.u8(status)) return malformed("answer", "truncated");
  if (status == 1) {
    uint8_t code = 0;
    uint32_t length = 0;
    std::string message;
    if (!in.u8(code) || !in.u32(length) || length > kMaxErrorMessageBytes ||
        !in.bytes(length, message) || !in.done()) {
      return malformed("answer", "truncated error");
    }
    const auto error_code = code <= static_cast<uint8_t>(ErrorCode::kInternal)
                                ? static_cast<ErrorCode>(code)
                                : ErrorCode::kInternal;
    // The root's own words; an empty one still has to say what happened.
    if (message.empty()) message = "the bootstrap root refused the join without a reason";
    return make_error(error_code, std::move(message));
  }
  if (status != 0) return malformed("answer", fmt::format("status {}", status));
  uint32_t count = 0;
  if (!in.u32(count)) return malformed("answer", "truncated");
  if (count != static_cast<uint32_t>(nranks)) {
    return malformed("answer", fmt::format("{} blobs, expected {}", count, nranks));
  }
  if (count > payload.size() / 4) return malformed("answer", "truncated");
  std::vector<std::string> blobs(count);
  for (auto& blob : blobs) {
    uint32_t length = 0;
    if (!in.u32(length) || length > kMaxBlobBytes || !in.bytes(length, blob)) {
      return malformed("answer", "truncated or oversized blob");
    }
  }
  if (!in.done()) return malformed("answer", "trailing bytes");
  return blobs;
}

std::string length_prefix(uint32_t length) {
  std::string out(4, '\0');
  common::store_be32(reinterpret_cast<uint8_t*>(out.data()), length);
  return out;
}

uint32_t read_length_prefix(std::string_view four_bytes) noexcept {
  return common::load_be32(reinterpret_cast<const uint8_t*>(four_bytes.data()));
}

std::string frame(std::string_view payload) {
  std::string out = length_prefix(static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

}  // namespace detwan::collectives::bootstrap
