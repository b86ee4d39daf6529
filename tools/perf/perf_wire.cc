#include "tools/perf/perf_wire.h"

#include <cstring>

namespace detwan::perf {
namespace {

void put_u32(uint8_t* p, uint32_t v) noexcept {
  for (int i = 3; i >= 0; --i) {
    p[i] = static_cast<uint8_t>(v & 0xff);
    v >>= 8;
  }
}

void put_u64(uint8_t* p, uint64_t v) noexcept {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<uint8_t>(v & 0xff);
    v >>= 8;
  }
}

uint32_t get_u32(const uint8_t* p) noexcept {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}

uint64_t get_u64(const uint8_t* p) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

size_t encode(const Packet& packet, uint8_t* buf, size_t buf_size, size_t size) noexcept {
  if (buf == nullptr || size < kHeaderBytes || size > buf_size) return 0;
  // Only the padding needs zeroing: the header is written in full below.
  std::memset(buf, 0, size);
  put_u32(buf, kMagic);
  buf[4] = kWireVersion;
  buf[5] = static_cast<uint8_t>(packet.kind);
  put_u32(buf + 8, packet.session);
  put_u64(buf + 16, packet.seq);
  put_u64(buf + 24, static_cast<uint64_t>(packet.t_a));
  put_u64(buf + 32, static_cast<uint64_t>(packet.t_b));
  put_u64(buf + 40, static_cast<uint64_t>(packet.t_c));
  return size;
}

DecodeResult decode(const uint8_t* buf, size_t size, Packet* out) noexcept {
  if (buf == nullptr || size < kHeaderBytes) return DecodeResult::kTooShort;
  if (get_u32(buf) != kMagic) return DecodeResult::kBadMagic;
  if (buf[4] != kWireVersion) return DecodeResult::kBadVersion;
  const uint8_t kind = buf[5];
  if (kind < static_cast<uint8_t>(Kind::kHello) || kind > static_cast<uint8_t>(Kind::kFin)) {
    return DecodeResult::kBadKind;
  }
  if (out == nullptr) return DecodeResult::kOk;
  out->kind = static_cast<Kind>(kind);
  out->session = get_u32(buf + 8);
  out->seq = get_u64(buf + 16);
  out->t_a = static_cast<int64_t>(get_u64(buf + 24));
  out->t_b = static_cast<int64_t>(get_u64(buf + 32));
  out->t_c = static_cast<int64_t>(get_u64(buf + 40));
  return DecodeResult::kOk;
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
