#include <cstring>

#include <isa-l/crc.h>

#include "common/byte_order.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto::wire {

using common::load_be16;
using common::load_be32;
using common::load_be64;
using common::Status;
using common::store_be16;
using common::store_be32;
using common::store_be64;

uint32_t crc32c(std::span<const std::byte> bytes) {
  // ISA-L takes a non-const pointer but does not write through it.
  return crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(bytes.data())),
                     static_cast<int>(bytes.size()), 0xFFFFFFFFu);
}

namespace {

void put_header(const Header& h, std::byte* p) {
  store_be16(p, kMagic);
  p[2] = std::byte{h.version};
  p[3] = static_cast<std::byte>(h.type);
  p[4] = std::byte{h.path_id};
  p[5] = std::byte{h.flags};
  store_be64(p + 6, h.connection_id);
  store_be64(p + 14, static_cast<uint64_t>(h.tx_time_ns));
  store_be32(p + kCrcOffset, h.version == kVersionSealed ? h.packet_number : 0);
}

// The plain protocol's CRC32C; a sealed datagram keeps its packet number there (the caller
// appends the tag).
size_t seal(const Header& h, std::span<std::byte> out, size_t size,
            size_t crc_offset = kCrcOffset) {
  if (h.version == kVersionSealed) return size;
  store_be32(out.data() + crc_offset, crc32c(out.first(size)));
  return size;
}

bool is_short_form(std::span<const std::byte> d) {
  return !d.empty() && (std::to_integer<uint8_t>(d[0]) & kDataMarkerMask) == kDataMarker;
}

// index (28 bits) and last_index (28 bits) in 7 bytes, big-endian.
void put_indices(std::byte* p, uint32_t index, uint32_t last_index) {
  const uint64_t v = (uint64_t{index} << 28) | last_index;
  for (int i = 0; i < 7; ++i) p[i] = static_cast<std::byte>(v >> (8 * (6 - i)));
}

bool get_indices(const std::byte* p, uint32_t* index, uint32_t* last_index) {
  uint64_t v = 0;
  for (int i = 0; i < 7; ++i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  *index = static_cast<uint32_t>(v >> 28);
  *last_index = static_cast<uint32_t>(v & kMaxSegmentIndex);
  return *index <= *last_index;
}

void put_ack(const AckBody& b, std::byte* p) {
  const size_t count = b.range_count > kMaxSackRanges ? kMaxSackRanges : b.range_count;
  store_be64(p, b.cumulative);
  store_be32(p + 8, b.echo_tx_time_us);
  store_be64(p + 12, static_cast<uint64_t>(b.ack_delay_ns));
  store_be64(p + 20, b.window_bytes);
  p[28] = static_cast<std::byte>(count);
  p += kAckFixedBytes;
  for (size_t i = 0; i < count; ++i, p += 16) {
    store_be64(p, b.ranges[i].start);
    store_be64(p + 8, b.ranges[i].end);
  }
}

}  // namespace

size_t encode_hello(const Header& h, const HelloBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + kHelloBodyBytes;
  if (out.size() < size) return 0;
  put_header(h, out.data());
  std::byte* p = out.data() + kHeaderBytes;
  store_be64(p, b.recv_window_bytes);
  p[8] = std::byte{b.version};
  store_be16(p + 9, b.segment_bytes);
  return seal(h, out, size);
}

size_t encode_sealed_hello(const Header& h, const SealedHelloBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + kSealedHelloBodyBytes;
  if (out.size() < size || h.version != kVersionSealed) return 0;
  put_header(h, out.data());
  std::byte* p = out.data() + kHeaderBytes;
  store_be64(p, b.hello.recv_window_bytes);
  p[8] = std::byte{b.hello.version};
  store_be16(p + 9, b.hello.segment_bytes);
  p[kHelloBodyBytes] = std::byte{b.mode};
  std::memcpy(p + kHelloBodyBytes + 1, b.nonce.data(), kHandshakeNonceBytes);
  std::memcpy(p + kHelloBodyBytes + 1 + kHandshakeNonceBytes, b.mac.data(), kHandshakeMacBytes);
  return size;
}

size_t encode_data_symbol(const DataBody& b, std::span<std::byte> out) {
  const size_t size = kDataSymbolFixedBytes + b.payload.size();
  if (out.size() < size || b.payload.size() > 0xFFFF || b.index > b.last_index ||
      b.last_index > kMaxSegmentIndex) {
    return 0;
  }
  std::byte* p = out.data();
  put_indices(p, b.index, b.last_index);
  store_be16(p + 7, static_cast<uint16_t>(b.payload.size()));
  if (!b.payload.empty()) {
    std::memcpy(p + kDataSymbolFixedBytes, b.payload.data(), b.payload.size());
  }
  return size;
}

size_t encode_data(const Header& h, const DataBody& b, std::span<std::byte> out,
                   const AckBody* ack) {
  const size_t ack_bytes = ack != nullptr ? ack_body_bytes(*ack) : 0;
  const size_t size = kDataHeaderBytes + ack_bytes + b.payload.size();
  if (out.size() < size || h.path_id >= kMaxShortPaths || b.index > b.last_index ||
      b.last_index > kMaxSegmentIndex) {
    return 0;
  }
  std::byte* p = out.data();
  p[0] = static_cast<std::byte>(kDataMarker | (ack != nullptr ? kDataAckBit : 0) | h.path_id);
  store_be32(p + 1, static_cast<uint32_t>(h.connection_id));
  store_be32(p + 5, static_cast<uint32_t>(static_cast<uint64_t>(h.tx_time_ns) / 1000));
  store_be32(p + kShortCrcOffset, h.version == kVersionSealed ? h.packet_number : 0);
  store_be32(p + kShortHeaderBytes, static_cast<uint32_t>(b.seq));
  put_indices(p + kShortHeaderBytes + 4, b.index, b.last_index);
  if (ack != nullptr) put_ack(*ack, p + kDataHeaderBytes);
  if (!b.payload.empty()) {
    std::memcpy(p + kDataHeaderBytes + ack_bytes, b.payload.data(), b.payload.size());
  }
  return seal(h, out, size, kShortCrcOffset);
}

size_t encode_ack(const Header& h, const AckBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + ack_body_bytes(b);
  if (out.size() < size) return 0;
  put_header(h, out.data());
  put_ack(b, out.data() + kHeaderBytes);
  return seal(h, out, size);
}

size_t encode_fec(const Header& h, const FecBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + kFecFixedBytes + b.symbol.size();
  if (out.size() < size || b.symbol.size() > 0xFFFF) return 0;
  put_header(h, out.data());
  std::byte* p = out.data() + kHeaderBytes;
  store_be64(p, b.first_seq);
  p[8] = std::byte{b.k};
  p[9] = std::byte{b.m};
  p[10] = std::byte{b.index};
  store_be16(p + 11, static_cast<uint16_t>(b.symbol.size()));
  if (!b.symbol.empty()) std::memcpy(p + kFecFixedBytes, b.symbol.data(), b.symbol.size());
  return seal(h, out, size);
}

size_t encode_empty(const Header& h, std::span<std::byte> out) {
  if (out.size() < kHeaderBytes) return 0;
  put_header(h, out.data());
  return seal(h, out, kHeaderBytes);
}

size_t encode_close(const Header& h, const CloseBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + kCloseBodyBytes;
  if (out.size() < size) return 0;
  put_header(h, out.data());
  store_be16(out.data() + kHeaderBytes, b.reason);
  return seal(h, out, size);
}

Status decode_header(std::span<const std::byte> d, Header& h) {
  if (is_short_form(d)) {
    if (d.size() < kShortHeaderBytes) return Status::kMalformed;
    h.type = Type::kData;
    h.version = kVersion;
    h.short_form = true;
    h.path_id = std::to_integer<uint8_t>(d[0]) & (kMaxShortPaths - 1);
    h.flags = (std::to_integer<uint8_t>(d[0]) & kDataAckBit) != 0 ? kFlagAck : 0;
    h.connection_id = load_be32(d.data() + 1);
    h.tx_time_us = load_be32(d.data() + 5);
    h.packet_number = load_be32(d.data() + kShortCrcOffset);
    h.tx_time_ns = 0;
    return Status::kOk;
  }
  if (d.size() < kHeaderBytes) return Status::kMalformed;
  if (load_be16(d.data()) != kMagic) return Status::kMalformed;
  h.version = std::to_integer<uint8_t>(d[2]);
  if (h.version != kVersion && h.version != kVersionSealed) return Status::kMalformed;
  h.packet_number = load_be32(d.data() + kCrcOffset);
  const uint8_t type = std::to_integer<uint8_t>(d[3]);
  if (type < static_cast<uint8_t>(Type::kHello) || type > static_cast<uint8_t>(Type::kClose)) {
    return Status::kMalformed;
  }
  h.type = static_cast<Type>(type);
  // DATA exists only in the short form.
  if (h.type == Type::kData) return Status::kMalformed;
  h.short_form = false;
  h.path_id = std::to_integer<uint8_t>(d[4]);
  h.flags = std::to_integer<uint8_t>(d[5]);
  h.connection_id = load_be64(d.data() + 6);
  h.tx_time_ns = static_cast<int64_t>(load_be64(d.data() + 14));
  h.tx_time_us = static_cast<uint32_t>(static_cast<uint64_t>(h.tx_time_ns) / 1000);
  return Status::kOk;
}

bool crc_ok(std::span<const std::byte> d) {
  const size_t at = is_short_form(d) ? kShortCrcOffset : kCrcOffset;
  if (d.size() < at + 4) return false;
  const uint32_t stored = load_be32(d.data() + at);
  // CRC over the datagram with the crc field taken as zero, without copying it.
  static constexpr std::byte kZero[4] = {};
  uint32_t crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(d.data())),
                             static_cast<int>(at), 0xFFFFFFFFu);
  crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(kZero)), 4, crc);
  crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(d.data() + at + 4)),
                    static_cast<int>(d.size() - at - 4), crc);
  return crc == stored;
}

Status decode_hello(std::span<const std::byte> body, HelloBody& b) {
  if (body.size() != kHelloBodyBytes) return Status::kMalformed;
  b.recv_window_bytes = load_be64(body.data());
  b.version = std::to_integer<uint8_t>(body[8]);
  b.segment_bytes = load_be16(body.data() + 9);
  if (b.segment_bytes == 0) return Status::kMalformed;
  return Status::kOk;
}

Status decode_sealed_hello(std::span<const std::byte> body, SealedHelloBody& b) {
  if (body.size() != kSealedHelloBodyBytes) return Status::kMalformed;
  if (decode_hello(body.first(kHelloBodyBytes), b.hello) != Status::kOk) return Status::kMalformed;
  b.mode = std::to_integer<uint8_t>(body[kHelloBodyBytes]);
  std::memcpy(b.nonce.data(), body.data() + kHelloBodyBytes + 1, kHandshakeNonceBytes);
  std::memcpy(b.mac.data(), body.data() + kHelloBodyBytes + 1 + kHandshakeNonceBytes,
              kHandshakeMacBytes);
  return Status::kOk;
}

Status decode_data_symbol(std::span<const std::byte> s, DataBody& b) {
  if (s.size() < kDataSymbolFixedBytes) return Status::kMalformed;
  const size_t len = load_be16(s.data() + 7);
  if (s.size() < kDataSymbolFixedBytes + len) return Status::kMalformed;
  if (!get_indices(s.data(), &b.index, &b.last_index)) return Status::kMalformed;
  b.payload = s.subspan(kDataSymbolFixedBytes, len);
  return Status::kOk;
}

Status decode_data(std::span<const std::byte> body, DataBody& b, AckBody* ack) {
  constexpr size_t kFixed = kDataHeaderBytes - kShortHeaderBytes;
  if (body.size() < kFixed) return Status::kMalformed;
  b.seq = load_be32(body.data());
  if (!get_indices(body.data() + 4, &b.index, &b.last_index)) return Status::kMalformed;
  size_t at = kFixed;
  if (ack != nullptr) {
    if (body.size() < at + kAckFixedBytes) return Status::kMalformed;
    const size_t count = std::to_integer<size_t>(body[at + 28]);
    const size_t ack_bytes = kAckFixedBytes + 16 * count;
    if (count > kMaxSackRanges || body.size() < at + ack_bytes) return Status::kMalformed;
    if (decode_ack(body.subspan(at, ack_bytes), *ack) != Status::kOk) return Status::kMalformed;
    at += ack_bytes;
  }
  if (body.size() - at > 0xFFFF) return Status::kMalformed;
  b.payload = body.subspan(at);
  return Status::kOk;
}

Status decode_ack(std::span<const std::byte> body, AckBody& b) {
  if (body.size() < kAckFixedBytes) return Status::kMalformed;
  const std::byte* p = body.data();
  const size_t count = std::to_integer<size_t>(p[28]);
  if (count > kMaxSackRanges || body.size() != kAckFixedBytes + 16 * count) {
    return Status::kMalformed;
  }
  b.cumulative = load_be64(p);
  b.echo_tx_time_us = load_be32(p + 8);
  b.ack_delay_ns = static_cast<int64_t>(load_be64(p + 12));
  b.window_bytes = load_be64(p + 20);
  if (b.ack_delay_ns < 0) return Status::kMalformed;
  b.range_count = static_cast<uint8_t>(count);
  p += kAckFixedBytes;
  for (size_t i = 0; i < count; ++i, p += 16) {
    b.ranges[i].start = load_be64(p);
    b.ranges[i].end = load_be64(p + 8);
    if (b.ranges[i].end <= b.ranges[i].start) return Status::kMalformed;
  }
  return Status::kOk;
}

Status decode_fec(std::span<const std::byte> body, FecBody& b) {
  if (body.size() < kFecFixedBytes) return Status::kMalformed;
  const std::byte* p = body.data();
  const size_t len = load_be16(p + 11);
  if (body.size() != kFecFixedBytes + len || len < kDataSymbolFixedBytes) return Status::kMalformed;
  b.first_seq = load_be64(p);
  b.k = std::to_integer<uint8_t>(p[8]);
  b.m = std::to_integer<uint8_t>(p[9]);
  b.index = std::to_integer<uint8_t>(p[10]);
  if (b.k == 0 || b.k > 128 || b.m == 0 || b.m > 32 || b.index >= b.m) return Status::kMalformed;
  b.symbol = body.subspan(kFecFixedBytes, len);
  return Status::kOk;
}

Status decode_close(std::span<const std::byte> body, CloseBody& b) {
  if (body.size() != kCloseBodyBytes) return Status::kMalformed;
  b.reason = load_be16(body.data());
  return Status::kOk;
}

}  // namespace detwan::transport::proto::wire
