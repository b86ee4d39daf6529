#include "tools/probe/wire.h"

#include <cstring>

namespace detwan::probe {
namespace {

void put_u64(uint8_t* p, uint64_t v) noexcept {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<uint8_t>(v & 0xff);
    v >>= 8;
  }
}

uint64_t get_u64(const uint8_t* p) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

size_t encode(const Packet& packet, uint8_t* buf, size_t buf_size, size_t size) noexcept {
  const size_t min_size = packet.kind == Kind::kFin ? kFinBytes : kDataHeaderBytes;
  if (size < min_size || size > buf_size) return 0;
  std::memset(buf, 0, size);
  buf[0] = static_cast<uint8_t>(kMagic >> 24);
  buf[1] = static_cast<uint8_t>(kMagic >> 16);
  buf[2] = static_cast<uint8_t>(kMagic >> 8);
  buf[3] = static_cast<uint8_t>(kMagic);
  buf[4] = kVersion;
  buf[5] = static_cast<uint8_t>(packet.kind);
  put_u64(buf + 8, packet.run_id);
  put_u64(buf + 16, packet.seq);
  put_u64(buf + 24, static_cast<uint64_t>(packet.tx_ns));
  if (packet.kind == Kind::kFin) put_u64(buf + 32, static_cast<uint64_t>(packet.last_tx_ns));
  return size;
}

DecodeResult decode(const uint8_t* buf, size_t size, Packet* out) noexcept {
  if (buf == nullptr || size < kDataHeaderBytes) return DecodeResult::kMalformed;
  const uint32_t magic = (uint32_t{buf[0]} << 24) | (uint32_t{buf[1]} << 16) |
                         (uint32_t{buf[2]} << 8) | uint32_t{buf[3]};
  if (magic != kMagic || buf[4] != kVersion) return DecodeResult::kMalformed;
  if (buf[5] > static_cast<uint8_t>(Kind::kFin)) return DecodeResult::kMalformed;
  Packet p;
  p.kind = static_cast<Kind>(buf[5]);
  p.run_id = get_u64(buf + 8);
  p.seq = get_u64(buf + 16);
  p.tx_ns = static_cast<int64_t>(get_u64(buf + 24));
  if (p.kind == Kind::kFin) {
    if (size < kFinBytes) return DecodeResult::kMalformed;
    p.last_tx_ns = static_cast<int64_t>(get_u64(buf + 32));
    if (p.seq > kMaxSeq || p.last_tx_ns < p.tx_ns) return DecodeResult::kMalformed;
  } else if (p.seq >= kMaxSeq) {
    return DecodeResult::kMalformed;
  }
  if (p.tx_ns <= 0) return DecodeResult::kMalformed;
  *out = p;
  return DecodeResult::kOk;
}

}  // namespace detwan::probe
