#include "tools/probe/wire.h"

#include <cstring>

#include "common/byte_order.h"

namespace detwan::probe {

size_t encode(const Packet& packet, uint8_t* buf, size_t buf_size, size_t size) noexcept {
  const size_t min_size = packet.kind == Kind::kFin ? kFinBytes : kDataHeaderBytes;
  if (size < min_size || size > buf_size) return 0;
  std::memset(buf, 0, size);
  common::store_be32(buf, kMagic);
  buf[4] = kVersion;
  buf[5] = static_cast<uint8_t>(packet.kind);
  common::store_be64(buf + 8, packet.run_id);
  common::store_be64(buf + 16, packet.seq);
  common::store_be64(buf + 24, static_cast<uint64_t>(packet.tx_ns));
  if (packet.kind == Kind::kFin) {
    common::store_be64(buf + 32, static_cast<uint64_t>(packet.last_tx_ns));
  }
  return size;
}

DecodeResult decode(const uint8_t* buf, size_t size, Packet* out) noexcept {
  if (buf == nullptr || size < kDataHeaderBytes) return DecodeResult::kMalformed;
  if (common::load_be32(buf) != kMagic || buf[4] != kVersion) return DecodeResult::kMalformed;
  if (buf[5] > static_cast<uint8_t>(Kind::kFin)) return DecodeResult::kMalformed;
  Packet p;
  p.kind = static_cast<Kind>(buf[5]);
  p.run_id = common::load_be64(buf + 8);
  p.seq = common::load_be64(buf + 16);
  p.tx_ns = static_cast<int64_t>(common::load_be64(buf + 24));
  if (p.kind == Kind::kFin) {
    if (size < kFinBytes) return DecodeResult::kMalformed;
    p.last_tx_ns = static_cast<int64_t>(common::load_be64(buf + 32));
    if (p.seq > kMaxSeq || p.last_tx_ns < p.tx_ns) return DecodeResult::kMalformed;
  } else if (p.seq >= kMaxSeq) {
    return DecodeResult::kMalformed;
  }
  if (p.tx_ns <= 0) return DecodeResult::kMalformed;
  *out = p;
  return DecodeResult::kOk;
}

}  // namespace detwan::probe
