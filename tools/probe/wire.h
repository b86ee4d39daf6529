#pragma once
// Wire format of detwan-probe packets (UDP payload, big-endian):
//
//   offset size  field
//        0    4  magic 'DWPB' (0x44575042)
//        4    1  version (1)
//        5    1  kind: 0 data, 1 fin
//        6    2  reserved (0)
//        8    8  run id (random per sender run; the receiver locks onto the first it sees)
//       16    8  sequence number (data: 0, 1, 2, ...; fin: number of data packets sent)
//       24    8  transmit time, CLOCK_REALTIME ns (fin: first data packet's)
//       32    8  fin only: last data packet's transmit time
//   data packets are padded with zeros to the requested size.
//
// decode() treats the bytes as hostile: it checks length, magic, version, kind and ranges and
// never reads past `size`.
#include <cstddef>
#include <cstdint>

namespace detwan::probe {

inline constexpr int64_t kNsPerSec = 1'000'000'000;

inline constexpr uint32_t kMagic = 0x44575042;
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kDataHeaderBytes = 32;
inline constexpr size_t kFinBytes = 40;
inline constexpr size_t kMaxPayloadBytes = 1472;  // one 1500-byte IPv4 packet, no fragments
// Sequence numbers at or above this are rejected: it bounds the receiver's memory (32 MiB).
inline constexpr uint64_t kMaxSeq = uint64_t{1} << 28;

enum class Kind : uint8_t { kData = 0, kFin = 1 };

struct Packet {
  Kind kind = Kind::kData;
  uint64_t run_id = 0;
  uint64_t seq = 0;        // data: sequence number; fin: data packets sent
  int64_t tx_ns = 0;       // data: transmit time; fin: first transmit time
  int64_t last_tx_ns = 0;  // fin only
};

// Writes a packet of `size` bytes into buf (size >= kDataHeaderBytes for data, kFinBytes for
// fin, <= buf_size). Returns the bytes written, 0 if it does not fit.
size_t encode(const Packet& packet, uint8_t* buf, size_t buf_size, size_t size) noexcept;

enum class DecodeResult : uint8_t { kOk, kMalformed };

[[nodiscard]] DecodeResult decode(const uint8_t* buf, size_t size, Packet* out) noexcept;

}  // namespace detwan::probe
