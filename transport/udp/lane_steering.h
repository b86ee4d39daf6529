#pragma once
// Steering of a listen address's datagrams to the udp backend's lanes (transport/udp/lanes.h).
//
// Each lane (a progress thread with its own io_uring) binds its own socket to the listen
// address with SO_REUSEPORT; the kernel then picks, per datagram, one socket of that reuseport
// group. Its default pick hashes the 4-tuple, which would send the paths of one multipath
// channel (several client sockets) to different lanes, and a lane knows only its own
// connections. So the group gets a classic BPF program (SO_ATTACH_REUSEPORT_CBPF) that picks
// the socket from the datagram itself: index = (low 32 bits of the connection id) mod lanes,
// read where the wire format puts it (proto/wire.h):
//   DATA (short form, first byte & 0xE0 == 0xA0): bytes 1..4, big-endian;
//   every other datagram (common header):          bytes 10..13 (the id is a u64 at 6..13).
// Every datagram of a connection (HELLO, DATA, ACK, FEC, KEEPALIVE, CLOSE) names the same id,
// so it lands on the lane that owns the connection. A datagram too short for the load makes the
// program return 0 (lane 0, which drops and counts it like any malformed datagram); an index
// at or beyond the group's size (while lanes are still binding) falls back to the hash.
//
// Who may join the group: the kernel admits a socket to a reuseport group only if it has the
// same effective user id as the group's first socket, so another user cannot bind the port and
// take a share of the datagrams.
#include <cstdint>

#include "common/status.h"

namespace detwan::transport::udp {

inline constexpr uint32_t kMaxLanes = 64;

// The lane a datagram's bytes steer to, exactly as the attached program computes it (tests).
[[nodiscard]] uint32_t steered_lane(const uint8_t* datagram, uint32_t bytes, uint32_t lanes);

// Attaches the steering program for `lanes` sockets to `fd`'s reuseport group (every member
// may attach; the group keeps the last, identical, program). kIo naming the step on failure.
common::Result<void> attach_lane_steering(int fd, uint32_t lanes);

}  // namespace detwan::transport::udp
