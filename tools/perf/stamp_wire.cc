#include "tools/perf/stamp_wire.h"

#include <climits>
#include <cstring>

#include <sys/timex.h>

#include "common/byte_order.h"

namespace detwan::perf::stamp {
namespace {

constexpr int64_t kNsPerS = 1'000'000'000;
__extension__ using u128 = unsigned __int128;

// Floor division, so times before an epoch split into (seconds, ns in [0, 1e9)).
void split_ns(int64_t ns, int64_t* s, int64_t* rem) noexcept {
  *s = ns / kNsPerS;
  *rem = ns % kNsPerS;
  if (*rem < 0) {
    *rem += kNsPerS;
    *s -= 1;
  }
}

}  // namespace

uint64_t ntp_from_ns(int64_t unix_ns) noexcept {
  int64_t s = 0, rem = 0;
  split_ns(unix_ns, &s, &rem);
  // Round to the nearest 2^-32 s; rem < 1e9 keeps the fraction below 2^32.
  const uint64_t frac = ((static_cast<uint64_t>(rem) << 32) + kNsPerS / 2) / kNsPerS;
  const uint64_t ntp_s = static_cast<uint64_t>(s + static_cast<int64_t>(kNtpUnixOffsetS));
  return (ntp_s << 32) + frac;  // "+": a fraction rounded up to 2^32 carries into seconds
}

int64_t ns_from_ntp(uint64_t ntp) noexcept {
  int64_t s = static_cast<int64_t>(ntp >> 32);
  if (s < (int64_t{1} << 31)) s += int64_t{1} << 32;  // era 1
  const uint64_t frac = ntp & 0xffffffffu;
  const int64_t ns = static_cast<int64_t>((frac * kNsPerS + (uint64_t{1} << 31)) >> 32);
  return (s - static_cast<int64_t>(kNtpUnixOffsetS)) * kNsPerS + ns;
}

uint64_t ptp_from_ns(int64_t unix_ns, int32_t tai_offset_s) noexcept {
  int64_t s = 0, rem = 0;
  split_ns(unix_ns, &s, &rem);
  const uint32_t ptp_s = static_cast<uint32_t>(s + tai_offset_s);
  return (uint64_t{ptp_s} << 32) | static_cast<uint64_t>(rem);
}

int64_t ns_from_ptp(uint64_t ptp, int32_t tai_offset_s) noexcept {
  const int64_t s = static_cast<int64_t>(ptp >> 32) - tai_offset_s;
  // A hostile nanoseconds field >= 1e9 is taken as it is: the time is then simply wrong.
  return s * kNsPerS + static_cast<int64_t>(ptp & 0xffffffffu);
}

uint16_t encode_error_estimate(const ErrorEstimate& e) noexcept {
  return static_cast<uint16_t>((e.synchronized ? 0x8000 : 0) | (e.ptp ? 0x4000 : 0) |
                               ((e.scale & 0x3f) << 8) | e.multiplier);
}

ErrorEstimate decode_error_estimate(uint16_t raw) noexcept {
  ErrorEstimate e;
  e.synchronized = (raw & 0x8000) != 0;
  e.ptp = (raw & 0x4000) != 0;
  e.scale = static_cast<uint8_t>((raw >> 8) & 0x3f);
  e.multiplier = static_cast<uint8_t>(raw & 0xff);
  return e;
}

int64_t error_estimate_ns(const ErrorEstimate& e) noexcept {
  // multiplier * 2^scale * 1e9 / 2^32 < 2^8 * 2^63 * 2^30: fits in 128 bits.
  const u128 ns = ((u128{e.multiplier} << e.scale) * kNsPerS) >> 32;
  return ns > static_cast<u128>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(ns);
}

ErrorEstimate make_error_estimate(int64_t error_ns, bool synchronized, bool ptp) noexcept {
  ErrorEstimate e;
  e.synchronized = synchronized;
  e.ptp = ptp;
  const uint64_t err = error_ns > 0 ? static_cast<uint64_t>(error_ns) : 0;
  // In units of 2^-32 s, rounded up.
  const u128 units = ((u128{err} << 32) + kNsPerS - 1) / kNsPerS;
  uint8_t scale = 0;
  u128 multiplier = units;
  while (scale < 63) {
    multiplier = (units + (u128{1} << scale) - 1) >> scale;  // ceil(units / 2^scale)
    if (multiplier <= 255) break;
    ++scale;
  }
  if (multiplier > 255) multiplier = 255;  // beyond 2^63 * 255 units: the largest there is
  e.scale = scale;
  e.multiplier = multiplier == 0 ? 1 : static_cast<uint8_t>(multiplier);
  return e;
}

LocalClockState read_local_clock(StampTimestamp format) noexcept {
  timex tx{};
  const int state = ::adjtimex(&tx);
  LocalClockState out;
  const bool ptp = format == StampTimestamp::kPtp;
  if (state < 0) {  // cannot tell: claim nothing, and a large error (16 s, the kernel's cap)
    out.estimate = make_error_estimate(16 * kNsPerS, false, ptp);
    return out;
  }
  const bool synced = state != TIME_ERROR && (tx.status & STA_UNSYNC) == 0;
  const int64_t error_us = synced ? tx.esterror : tx.maxerror;
  out.estimate = make_error_estimate(error_us * 1000, synced, ptp);
  out.tai_offset_s = tx.tai;
  return out;
}

uint64_t encode_timestamp(StampTimestamp format, int64_t unix_ns, int32_t tai_offset_s) noexcept {
  return format == StampTimestamp::kPtp ? ptp_from_ns(unix_ns, tai_offset_s) : ntp_from_ns(unix_ns);
}

int64_t decode_timestamp(bool ptp, uint64_t raw, int32_t tai_offset_s) noexcept {
  return ptp ? ns_from_ptp(raw, tai_offset_s) : ns_from_ntp(raw);
}

const char* to_string(DecodeStatus s) noexcept {
  switch (s) {
    case DecodeStatus::kOk:
      return "ok";
    case DecodeStatus::kTooShort:
      return "too short";
  }
  return "unknown";
}

size_t encode_sender(const SenderPacket& p, uint8_t* buf, size_t buf_size, size_t size) noexcept {
  if (size < kBaseBytes || size > buf_size) return 0;
  std::memset(buf, 0, size);
  common::store_be32(buf, p.seq);
  common::store_be64(buf + 4, p.timestamp);
  common::store_be16(buf + 12, p.error_estimate);
  common::store_be16(buf + 14, p.ssid);
  return size;
}

DecodeStatus decode_sender(const uint8_t* buf, size_t size, SenderPacket* out) noexcept {
  if (size < kTwampLightSenderMinBytes) return DecodeStatus::kTooShort;
  out->seq = common::load_be32(buf);
  out->timestamp = common::load_be64(buf + 4);
  out->error_estimate = common::load_be16(buf + 12);
  out->ssid = size >= 16 ? common::load_be16(buf + 14) : 0;
  return DecodeStatus::kOk;
}

size_t encode_reflector_base(const ReflectorPacket& p, uint8_t* buf, size_t buf_size) noexcept {
  if (buf_size < kBaseBytes) return 0;
  std::memset(buf, 0, kBaseBytes);
  common::store_be32(buf, p.seq);
  common::store_be64(buf + 4, p.timestamp);
  common::store_be16(buf + 12, p.error_estimate);
  common::store_be16(buf + 14, p.ssid);
  common::store_be64(buf + 16, p.receive_timestamp);
  common::store_be32(buf + 24, p.sender_seq);
  common::store_be64(buf + 28, p.sender_timestamp);
  common::store_be16(buf + 36, p.sender_error_estimate);
  buf[40] = p.sender_ttl;
  return kBaseBytes;
}

DecodeStatus decode_reflector(const uint8_t* buf, size_t size, ReflectorPacket* out) noexcept {
  if (size < kTwampLightReflectorMinBytes) return DecodeStatus::kTooShort;
  out->seq = common::load_be32(buf);
  out->timestamp = common::load_be64(buf + 4);
  out->error_estimate = common::load_be16(buf + 12);
  out->ssid = common::load_be16(buf + 14);
  out->receive_timestamp = common::load_be64(buf + 16);
  out->sender_seq = common::load_be32(buf + 24);
  out->sender_timestamp = common::load_be64(buf + 28);
  out->sender_error_estimate = common::load_be16(buf + 36);
  out->sender_ttl = buf[40];
  return DecodeStatus::kOk;
}

TlvStatus read_tlv(const uint8_t* packet, size_t size, size_t offset, TlvView* out) noexcept {
  if (offset == size) return TlvStatus::kEnd;
  if (offset > size || size - offset < kTlvHeaderBytes) return TlvStatus::kMalformed;
  out->flags = packet[offset];
  out->type = packet[offset + 1];
  out->length = common::load_be16(packet + offset + 2);
  out->value_offset = offset + kTlvHeaderBytes;
  if (out->length > size - out->value_offset) return TlvStatus::kMalformed;
  return TlvStatus::kOk;
}

size_t write_cos_tlv(uint8_t* packet, size_t size, size_t offset, uint8_t dscp1) noexcept {
  const size_t bytes = kTlvHeaderBytes + kCosValueBytes;
  if (offset > size || size - offset < bytes) return 0;
  uint8_t* p = packet + offset;
  p[0] = 0;
  p[1] = kTlvClassOfService;
  common::store_be16(p + 2, kCosValueBytes);
  common::store_be32(p + 4, uint32_t{static_cast<uint8_t>(dscp1 & 0x3f)} << 26);
  return bytes;
}

CosValue read_cos_value(const uint8_t* value) noexcept {
  const uint32_t v = common::load_be32(value);
  CosValue c;
  c.dscp1 = static_cast<uint8_t>((v >> 26) & 0x3f);
  c.dscp2 = static_cast<uint8_t>((v >> 20) & 0x3f);
  c.ecn = static_cast<uint8_t>((v >> 18) & 0x3);
  c.rp = static_cast<uint8_t>((v >> 16) & 0x3);
  return c;
}

TlvReflectResult reflect_tlvs(uint8_t* reply, size_t size, int received_tos,
                              bool apply_dscp1) noexcept {
  TlvReflectResult result;
  size_t offset = kBaseBytes;
  while (offset < size) {
    const uint8_t type = size - offset >= 2 ? reply[offset + 1] : reply[offset];
    if (type == 0) break;  // type 0 is reserved: zero padding, not TLVs
    TlvView tlv;
    if (read_tlv(reply, size, offset, &tlv) != TlvStatus::kOk) {
      // A truncated TLV: flag it (when its flags byte exists) and stop walking.
      reply[offset] |= kTlvFlagMalformed;
      result.malformed = true;
      break;
    }
    ++result.tlvs;
    uint8_t* value = reply + tlv.value_offset;
    if (tlv.type == kTlvClassOfService) {
      if (tlv.length < kCosValueBytes) {
        reply[offset] |= kTlvFlagMalformed;
        result.malformed = true;
      } else {
        CosValue cos = read_cos_value(value);
        result.requested_dscp = cos.dscp1;
        // Keep DSCP1 and the reserved bits; DSCP2 and ECN: as received; RP: 0 when DSCP1 is
        // applied to the reflected packet, 1 when it is not.
        uint32_t v = common::load_be32(value) & 0xfc00ffffu;
        if (!apply_dscp1) v |= uint32_t{kCosRpNotApplied} << 16;
        if (received_tos >= 0) {
          const uint32_t tos = static_cast<uint8_t>(received_tos);
          v |= (tos >> 2) << 20;  // DSCP2
          v |= (tos & 3u) << 18;  // ECN
        }
        common::store_be32(value, v);
      }
    } else if (tlv.type != kTlvExtraPadding) {
      reply[offset] |= kTlvFlagUnrecognized;
    }
    offset = tlv.value_offset + tlv.length;
  }
  return result;
}

bool find_cos_tlv(const uint8_t* packet, size_t size, CosValue* out) noexcept {
  size_t offset = kBaseBytes;
  TlvView tlv;
  while (offset < size && read_tlv(packet, size, offset, &tlv) == TlvStatus::kOk) {
    if (tlv.type == 0) return false;  // padding
    if (tlv.type == kTlvClassOfService && tlv.length >= kCosValueBytes) {
      *out = read_cos_value(packet + tlv.value_offset);
      return true;
    }
    offset = tlv.value_offset + tlv.length;
  }
  return false;
}

}  // namespace detwan::perf::stamp
