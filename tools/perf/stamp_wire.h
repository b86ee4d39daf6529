#pragma once
// STAMP (RFC 8762) unauthenticated test packets with the RFC 8972 SSID and TLVs. Big-endian.
//
// Session-Sender (44 bytes base)        Session-Reflector (44 bytes base)
//   0  4 sequence number                  0  4 sequence number
//   4  8 timestamp                        4  8 timestamp (just before sending)
//  12  2 error estimate                  12  2 error estimate
//  14  2 SSID                            14  2 SSID (echoed)
//  16 28 MBZ                             16  8 receive timestamp
//  44  . TLVs (or zero padding)          24  4 session-sender sequence number
//                                        28  8 session-sender timestamp
//                                        36  2 session-sender error estimate
//                                        38  2 MBZ
//                                        40  1 session-sender TTL
//                                        41  3 MBZ
//                                        44  . TLVs (copied from the sender's packet)
//
// TWAMP Light (RFC 5357 appendix I) packets are shorter: a sender packet needs only sequence
// number, timestamp and error estimate (14 bytes), a reflector packet 41 bytes. RFC 8762 4.6: a
// STAMP reflector answers a shorter packet with the base packet, a longer one with a packet of
// the same size. Error estimate (RFC 4656 4.1.2): S (synchronised to UTC) | Z (0 NTP, 1 PTP) |
// scale (6 bits) | multiplier (8 bits); error = multiplier * 2^(scale - 32) seconds.
//
// Every decoder treats its input as hostile: it checks the size and never reads past it.
// Nothing here allocates or throws.
#include <cstddef>
#include <cstdint>

#include "tools/perf/options.h"

namespace detwan::perf::stamp {

inline constexpr size_t kBaseBytes = 44;                 // STAMP sender and reflector packets
inline constexpr size_t kTwampLightSenderMinBytes = 14;  // seq + timestamp + error estimate
inline constexpr size_t kTwampLightReflectorMinBytes = 41;
inline constexpr size_t kMaxPacketBytes = 65507;

// ---- timestamps ----------------------------------------------------------------------------
inline constexpr uint64_t kNtpUnixOffsetS = 2'208'988'800;  // 1900-01-01 to 1970-01-01

// NTP 64-bit: seconds since 1900 (32 bits) . fraction of 2^-32 s (rounded to nearest).
// Times before 1968-01-20 (NTP seconds < 2^31) decode as NTP era 1 (after 2036-02-07).
[[nodiscard]] uint64_t ntp_from_ns(int64_t unix_ns) noexcept;
[[nodiscard]] int64_t ns_from_ntp(uint64_t ntp) noexcept;
// PTPv2 truncated: seconds (32 bits) . nanoseconds (32 bits) since the PTP epoch, on the TAI
// timescale: PTP seconds = Unix (UTC) seconds + tai_offset_s (the kernel's TAI offset, 37 s
// when chrony/ptp4l set it, else 0).
[[nodiscard]] uint64_t ptp_from_ns(int64_t unix_ns, int32_t tai_offset_s) noexcept;
[[nodiscard]] int64_t ns_from_ptp(uint64_t ptp, int32_t tai_offset_s) noexcept;

// ---- error estimate ------------------------------------------------------------------------
struct ErrorEstimate {
  bool synchronized = false;  // S
  bool ptp = false;           // Z: timestamps of this packet are PTP truncated
  uint8_t scale = 0;          // 6 bits
  uint8_t multiplier = 1;     // never 0 (RFC 4656)
};
[[nodiscard]] uint16_t encode_error_estimate(const ErrorEstimate& e) noexcept;
[[nodiscard]] ErrorEstimate decode_error_estimate(uint16_t raw) noexcept;
// Error in ns (rounded down; saturates at INT64_MAX).
[[nodiscard]] int64_t error_estimate_ns(const ErrorEstimate& e) noexcept;
// The smallest representable error >= error_ns (never understates it); multiplier >= 1.
[[nodiscard]] ErrorEstimate make_error_estimate(int64_t error_ns, bool synchronized,
                                                bool ptp) noexcept;

// This host's clock, read from adjtimex(): S = the kernel clock is synchronised (STA_UNSYNC
// clear and adjtimex not TIME_ERROR); the error is esterror when synchronised, maxerror when
// not. Also the kernel's TAI offset for PTP timestamps.
struct LocalClockState {
  ErrorEstimate estimate;
  int32_t tai_offset_s = 0;
};
[[nodiscard]] LocalClockState read_local_clock(StampTimestamp format) noexcept;

// Timestamp of `format` for a CLOCK_REALTIME time, and back (`ptp` as the packet's Z bit).
[[nodiscard]] uint64_t encode_timestamp(StampTimestamp format, int64_t unix_ns,
                                        int32_t tai_offset_s) noexcept;
[[nodiscard]] int64_t decode_timestamp(bool ptp, uint64_t raw, int32_t tai_offset_s) noexcept;

// ---- packets -------------------------------------------------------------------------------
struct SenderPacket {
  uint32_t seq = 0;
  uint64_t timestamp = 0;
  uint16_t error_estimate = 0;
  uint16_t ssid = 0;  // 0 in TWAMP Light packets (MBZ there)
};

struct ReflectorPacket {
  uint32_t seq = 0;
  uint64_t timestamp = 0;
  uint16_t error_estimate = 0;
  uint16_t ssid = 0;
  uint64_t receive_timestamp = 0;
  uint32_t sender_seq = 0;
  uint64_t sender_timestamp = 0;
  uint16_t sender_error_estimate = 0;
  uint8_t sender_ttl = 255;
};

enum class DecodeStatus : uint8_t { kOk, kTooShort };
[[nodiscard]] const char* to_string(DecodeStatus s) noexcept;

// Writes the base packet and zero-fills up to `size` (kBaseBytes <= size <= buf_size).
// Returns the bytes written, 0 if it does not fit.
size_t encode_sender(const SenderPacket& p, uint8_t* buf, size_t buf_size, size_t size) noexcept;
// Accepts size >= kTwampLightSenderMinBytes; the SSID reads as 0 when size < 16.
[[nodiscard]] DecodeStatus decode_sender(const uint8_t* buf, size_t size,
                                         SenderPacket* out) noexcept;

// Writes the 44-byte base only (bytes beyond it are the caller's: copied TLVs or padding).
// Returns kBaseBytes, 0 if buf_size < kBaseBytes.
size_t encode_reflector_base(const ReflectorPacket& p, uint8_t* buf, size_t buf_size) noexcept;
// Accepts size >= kTwampLightReflectorMinBytes (the SSID of a TWAMP Light reflector reads 0).
[[nodiscard]] DecodeStatus decode_reflector(const uint8_t* buf, size_t size,
                                            ReflectorPacket* out) noexcept;

// ---- TLVs (RFC 8972 section 4) -------------------------------------------------------------
//   flags (U M I R R R R R) | type | length (16 bits, of the value) | value
inline constexpr uint8_t kTlvFlagUnrecognized = 0x80;  // U: set by the reflector
inline constexpr uint8_t kTlvFlagMalformed = 0x40;     // M: set by the reflector
inline constexpr uint8_t kTlvFlagIntegrity = 0x20;     // I: HMAC failed (unused: no HMAC here)
inline constexpr uint8_t kTlvExtraPadding = 1;
inline constexpr uint8_t kTlvClassOfService = 4;
inline constexpr size_t kTlvHeaderBytes = 4;
inline constexpr size_t kCosValueBytes = 4;  // DSCP1 (6) DSCP2 (6) ECN (2) RP (2) reserved (16)

struct TlvView {
  uint8_t flags = 0;
  uint8_t type = 0;
  uint16_t length = 0;
  size_t value_offset = 0;  // into the packet
};

// Reads the TLV at `offset` of packet[0, size). kEnd: offset == size; kMalformed: a header or a
// value that does not fit.
enum class TlvStatus : uint8_t { kOk, kEnd, kMalformed };
[[nodiscard]] TlvStatus read_tlv(const uint8_t* packet, size_t size, size_t offset,
                                 TlvView* out) noexcept;

// Writes a Class of Service TLV (DSCP1 = the DSCP asked for the reflected packet; DSCP2, ECN
// and RP zero) at `offset`. Returns the bytes written (8), 0 if it does not fit.
size_t write_cos_tlv(uint8_t* packet, size_t size, size_t offset, uint8_t dscp1) noexcept;
struct CosValue {
  uint8_t dscp1 = 0, dscp2 = 0, ecn = 0, rp = 0;
};
[[nodiscard]] CosValue read_cos_value(const uint8_t* value) noexcept;

// Reflector side, on the reply buffer whose bytes [kBaseBytes, size) were copied from the
// request: marks unknown TLV types U and a truncated TLV M, and fills the Class of Service
// TLV's DSCP2/ECN with the received TOS byte (received_tos < 0: unknown, left 0) and its RP
// with 0 when the reflector applies DSCP1 to the reply (`apply_dscp1`), 1 when its policy does
// not (RFC 8972 5.2: DSCP1 is used only where local policy permits). A remainder that starts
// with a zero type byte is padding (TWAMP Light, or no TLVs) and is left as is. Returns DSCP1
// of a Class of Service TLV (the DSCP asked for the reply), -1 without one.
struct TlvReflectResult {
  int requested_dscp = -1;
  uint16_t tlvs = 0;
  bool malformed = false;
};
inline constexpr uint8_t kCosRpNotApplied = 1;
TlvReflectResult reflect_tlvs(uint8_t* reply, size_t size, int received_tos,
                              bool apply_dscp1) noexcept;

// Finds the first Class of Service TLV in packet[kBaseBytes, size). False when absent.
[[nodiscard]] bool find_cos_tlv(const uint8_t* packet, size_t size, CosValue* out) noexcept;

}  // namespace detwan::perf::stamp
