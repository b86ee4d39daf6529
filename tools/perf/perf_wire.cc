#include "tools/perf/perf_wire.h"

#include <cstring>

#include "common/byte_order.h"

namespace detwan::perf {

size_t encode(const Packet& packet, uint8_t* buf, size_t buf_size, size_t size) noexcept {
  if (buf == nullptr || size < kHeaderBytes || size > buf_size) return 0;
  // Only the padding needs zeroing: the header is written in full below.
  std::memset(buf, 0, size);
  common::store_be32(buf, kMagic);
  buf[4] = kWireVersion;
  buf[5] = static_cast<uint8_t>(packet.kind);
  common::store_be32(buf + 8, packet.session);
  common::store_be64(buf + 16, packet.seq);
  common::store_be64(buf + 24, static_cast<uint64_t>(packet.t_a));
  common::store_be64(buf + 32, static_cast<uint64_t>(packet.t_b));
  common::store_be64(buf + 40, static_cast<uint64_t>(packet.t_c));
  return size;
}

DecodeResult decode(const uint8_t* buf, size_t size, Packet* out) noexcept {
  if (buf == nullptr || size < kHeaderBytes) return DecodeResult::kTooShort;
  if (common::load_be32(buf) != kMagic) return DecodeResult::kBadMagic;
  if (buf[4] != kWireVersion) return DecodeResult::kBadVersion;
  const uint8_t kind = buf[5];
  if (kind < static_cast<uint8_t>(Kind::kHello) || kind > static_cast<uint8_t>(Kind::kFin)) {
    return DecodeResult::kBadKind;
  }
  if (out == nullptr) return DecodeResult::kOk;
  out->kind = static_cast<Kind>(kind);
  out->session = common::load_be32(buf + 8);
  out->seq = common::load_be64(buf + 16);
  out->t_a = static_cast<int64_t>(common::load_be64(buf + 24));
  out->t_b = static_cast<int64_t>(common::load_be64(buf + 32));
  out->t_c = static_cast<int64_t>(common::load_be64(buf + 40));
  return DecodeResult::kOk;
}

HelloToken hello_token_of(const Packet& hello) noexcept {
  return HelloToken{static_cast<uint64_t>(hello.t_b), static_cast<uint64_t>(hello.t_c)};
}

Packet make_hello(uint32_t session, uint64_t seq, int64_t t_a, const HelloToken& token) noexcept {
  return Packet{Kind::kHello,
                session,
                seq,
                t_a,
                static_cast<int64_t>(token.high),
                static_cast<int64_t>(token.low)};
}

const char* to_string(DecodeResult r) noexcept {
  switch (r) {
    case DecodeResult::kOk:
      return "ok";
    case DecodeResult::kTooShort:
      return "too short";
    case DecodeResult::kBadMagic:
      return "bad magic";
    case DecodeResult::kBadVersion:
      return "bad version";
    case DecodeResult::kBadKind:
      return "bad kind";
  }
  return "unknown";
}

}  // namespace detwan::perf
