#include <cstring>

#include <isa-l/crc.h>

#include "common/byte_order.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto::wire {

using common::load_be16;
using common::load_be64;
using common::store_be16;
using common::store_be32;
using common::store_be64;
using common::Status;

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
  store_be32(p + kCrcOffset, 0);
}

size_t seal(std::span<std::byte> out, size_t size) {
  store_be32(out.data() + kCrcOffset, crc32c(out.first(size)));
  return size;
}

}  // namespace

size_t encode_hello(const Header& h, const HelloBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + kHelloBodyBytes;
  if (out.size() < size) return 0;
  put_header(h, out.data());
  std::byte* p = out.data() + kHeaderBytes;
  store_be64(p, b.recv_window_bytes);
  p[8] = std::byte{b.version};
  return seal(out, size);
}

size_t encode_data_symbol(const DataBody& b, std::span<std::byte> out) {
  const size_t size = kDataFixedBytes + b.payload.size();
  if (out.size() < size || b.payload.size() > 0xFFFF) return 0;
  std::byte* p = out.data();
  store_be64(p, b.message_id);
  store_be64(p + 8, b.message_size);
  store_be64(p + 16, b.offset);
  store_be16(p + 24, static_cast<uint16_t>(b.payload.size()));
  if (!b.payload.empty()) std::memcpy(p + kDataFixedBytes, b.payload.data(), b.payload.size());
  return size;
}

size_t encode_data(const Header& h, const DataBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + kDataSeqBytes + kDataFixedBytes + b.payload.size();
  if (out.size() < size) return 0;
  put_header(h, out.data());
  store_be64(out.data() + kHeaderBytes, b.seq);
  if (encode_data_symbol(b, out.subspan(kHeaderBytes + kDataSeqBytes)) == 0) return 0;
  return seal(out, size);
}

size_t encode_ack(const Header& h, const AckBody& b, std::span<std::byte> out) {
  const size_t count = b.range_count > kMaxSackRanges ? kMaxSackRanges : b.range_count;
  const size_t size = kHeaderBytes + kAckFixedBytes + 16 * count;
  if (out.size() < size) return 0;
  put_header(h, out.data());
  std::byte* p = out.data() + kHeaderBytes;
  store_be64(p, b.cumulative);
  store_be64(p + 8, static_cast<uint64_t>(b.echo_tx_time_ns));
  store_be64(p + 16, static_cast<uint64_t>(b.ack_delay_ns));
  store_be64(p + 24, b.window_bytes);
  p[32] = static_cast<std::byte>(count);
  p += kAckFixedBytes;
  for (size_t i = 0; i < count; ++i, p += 16) {
    store_be64(p, b.ranges[i].start);
    store_be64(p + 8, b.ranges[i].end);
  }
  return seal(out, size);
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
  return seal(out, size);
}

size_t encode_empty(const Header& h, std::span<std::byte> out) {
  if (out.size() < kHeaderBytes) return 0;
  put_header(h, out.data());
  return seal(out, kHeaderBytes);
}

size_t encode_close(const Header& h, const CloseBody& b, std::span<std::byte> out) {
  const size_t size = kHeaderBytes + kCloseBodyBytes;
  if (out.size() < size) return 0;
  put_header(h, out.data());
  store_be16(out.data() + kHeaderBytes, b.reason);
  return seal(out, size);
}

Status decode_header(std::span<const std::byte> d, Header& h) {
  if (d.size() < kHeaderBytes) return Status::kMalformed;
  if (load_be16(d.data()) != kMagic) return Status::kMalformed;
  h.version = std::to_integer<uint8_t>(d[2]);
  if (h.version != kVersion) return Status::kMalformed;
  const uint8_t type = std::to_integer<uint8_t>(d[3]);
  if (type < static_cast<uint8_t>(Type::kHello) || type > static_cast<uint8_t>(Type::kClose)) {
    return Status::kMalformed;
  }
  h.type = static_cast<Type>(type);
  h.path_id = std::to_integer<uint8_t>(d[4]);
  h.flags = std::to_integer<uint8_t>(d[5]);
  h.connection_id = load_be64(d.data() + 6);
  h.tx_time_ns = static_cast<int64_t>(load_be64(d.data() + 14));
  return Status::kOk;
}

bool crc_ok(std::span<const std::byte> d) {
  if (d.size() < kHeaderBytes) return false;
  const uint32_t stored = common::load_be32(d.data() + kCrcOffset);
  // CRC over the datagram with the crc field taken as zero, without copying it.
  static constexpr std::byte kZero[4] = {};
  uint32_t crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(d.data())),
                             static_cast<int>(kCrcOffset), 0xFFFFFFFFu);
  crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(kZero)), 4, crc);
  crc = crc32_iscsi(
      reinterpret_cast<unsigned char*>(const_cast<std::byte*>(d.data() + kCrcOffset + 4)),
      static_cast<int>(d.size() - kCrcOffset - 4), crc);
  return crc == stored;
}

Status decode_hello(std::span<const std::byte> body, HelloBody& b) {
  if (body.size() != kHelloBodyBytes) return Status::kMalformed;
  b.recv_window_bytes = load_be64(body.data());
  b.version = std::to_integer<uint8_t>(body[8]);
  return Status::kOk;
}

Status decode_data_symbol(std::span<const std::byte> s, DataBody& b) {
  if (s.size() < kDataFixedBytes) return Status::kMalformed;
  const size_t len = load_be16(s.data() + 24);
  if (s.size() < kDataFixedBytes + len) return Status::kMalformed;
  b.message_id = load_be64(s.data());
  b.message_size = load_be64(s.data() + 8);
  b.offset = load_be64(s.data() + 16);
  b.payload = s.subspan(kDataFixedBytes, len);
  return Status::kOk;
}

Status decode_data(std::span<const std::byte> body, DataBody& b) {
  if (body.size() < kDataSeqBytes + kDataFixedBytes) return Status::kMalformed;
  const size_t len = load_be16(body.data() + kDataSeqBytes + 24);
  if (body.size() != kDataSeqBytes + kDataFixedBytes + len) return Status::kMalformed;
  b.seq = load_be64(body.data());
  return decode_data_symbol(body.subspan(kDataSeqBytes), b);
}

Status decode_ack(std::span<const std::byte> body, AckBody& b) {
  if (body.size() < kAckFixedBytes) return Status::kMalformed;
  const std::byte* p = body.data();
  const size_t count = std::to_integer<size_t>(p[32]);
  if (count > kMaxSackRanges || body.size() != kAckFixedBytes + 16 * count) {
    return Status::kMalformed;
  }
  b.cumulative = load_be64(p);
  b.echo_tx_time_ns = static_cast<int64_t>(load_be64(p + 8));
  b.ack_delay_ns = static_cast<int64_t>(load_be64(p + 16));
  b.window_bytes = load_be64(p + 24);
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
  if (body.size() != kFecFixedBytes + len || len < kDataFixedBytes) return Status::kMalformed;
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
