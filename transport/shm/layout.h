#pragma once
// Wire format of the shm backend: the shared memory block and the socket hello.
//
// The client creates a sealed memfd of kControlBytes + 2 x ring_bytes and passes it, with two
// eventfds, over the Unix socket (SCM_RIGHTS). Layout of the memfd:
//
//   [0, kControlBytes)                         SharedControl (below)
//   [kControlBytes, + ring_bytes)              ring 0: client -> server
//   [kControlBytes + ring_bytes, + ring_bytes) ring 1: server -> client
//
// Each ring carries messages framed as [u64 length, host byte order][length bytes]; a frame may
// wrap around the end of the ring and a large message streams through in pieces.
//
// Every shared field has exactly one writer (noted per field) and is accessed with
// std::atomic_ref. The other side is untrusted: whatever it writes is validated before use, and
// nothing a side reads back from shared memory is ever its own state (each side keeps a private
// copy of the indices it owns).
#include <cstddef>
#include <cstdint>

namespace detwan::transport::shm {

inline constexpr uint64_t kMagic = 0x3176'6d68'7377'6474;  // "tdwshmv1" little-endian
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kControlBytes = 4096;
inline constexpr uint64_t kMinRingBytes = 64;
inline constexpr uint64_t kMaxRingBytes = uint64_t{1} << 32;
inline constexpr uint64_t kDefaultRingBytes = uint64_t{8} << 20;
inline constexpr size_t kFrameHeaderBytes = sizeof(uint64_t);

inline constexpr int kClientSide = 0;
inline constexpr int kServerSide = 1;

// One direction. head = bytes ever written (producer), tail = bytes ever read (consumer); the
// ring holds head - tail bytes at positions (index % ring_bytes). Separate cache lines so the
// two sides do not false-share.
struct RingIndices {
  alignas(64) uint64_t head;  // written by the producer only
  alignas(64) uint64_t tail;  // written by the consumer only
};

// Per-side state, written by that side only.
struct SideState {
  // Non-zero while the side's progress thread is (about to be) blocked in poll(): the other side
  // then writes the sleeper's eventfd after publishing an index. Dekker-style: both sides
  // use seq_cst for "store own flag / index, then load the other's".
  alignas(64) uint32_t sleeping;
  // Bumped by the side's progress thread at least every keepalive interval: a sign of life
  // while the rings do not move (peer_timeout_ns).
  alignas(64) uint64_t heartbeat;
  // The largest message this side accepts (0 = not yet announced).
  uint64_t max_message_bytes;
};

struct SharedControl {
  uint64_t magic;  // written by the client before the fd is passed, then read-only
  uint32_t version;
  uint32_t reserved;
  uint64_t ring_bytes;
  alignas(64) SideState sides[2];    // [kClientSide], [kServerSide]
  alignas(64) RingIndices rings[2];  // [0] client -> server, [1] server -> client
};
static_assert(sizeof(SharedControl) <= kControlBytes);

// Sent by the client as the one SEQPACKET message carrying the fds
// [memfd, client eventfd, server eventfd].
struct Hello {
  uint64_t magic;
  uint32_t version;
  uint32_t fd_count;
  uint64_t ring_bytes;
  uint64_t max_message_bytes;
};
inline constexpr int kHelloFdCount = 3;

// The ring a side produces into / consumes from.
constexpr int tx_ring(int side) { return side; }
constexpr int rx_ring(int side) { return 1 - side; }
constexpr int peer_side(int side) { return 1 - side; }

}  // namespace detwan::transport::shm
