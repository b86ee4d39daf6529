#pragma once
// Steering of a reuseport group's datagrams by a number they carry (setup tier, Linux).
//
// Several sockets bound to one address:port with SO_REUSEPORT form a reuseport group; per
// datagram the kernel picks one member. By default it hashes the 4-tuple. A classic BPF program
// attached with SO_ATTACH_REUSEPORT_CBPF picks instead: its return value is the index of the
// socket in the group, and the index is the order in which the members were bound (so bind the
// socket meant to be index 0 first, then 1, ...). The program built here reads a big-endian u32
// key from the UDP payload (offsets are from the payload: the kernel runs a reuseport program
// past the UDP header) and returns key mod `sockets`.
//
// Kernel rules the program relies on (net/core/sock_reuseport.c, run_bpf_filter and
// reuseport_select_sock):
//   - a load beyond the datagram ends a classic program with 0: a datagram too short for the key
//     goes to socket 0;
//   - a returned index >= the group's current size is ignored and the kernel falls back to its
//     hash (only while the group is still being bound: key mod sockets < sockets otherwise);
//   - the program runs once per skb: a UDP GSO skb delivered whole to a UDP_GRO socket, or a run
//     the device's GRO merged (one 4-tuple), goes to the socket its first datagram picks.
//
// Who may join the group: only sockets with the effective user id of its first socket.
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace detwan::common {

inline constexpr uint32_t kMaxSteeredSockets = 64;

struct ReuseportKey {
  uint32_t offset = 0;  // the key's first byte in the UDP payload
  // Optional second layout: when (payload[0] & marker_mask) == marker (and marker_mask != 0), the
  // key is at marker_offset instead (the udp transport's short DATA header).
  uint8_t marker_mask = 0;
  uint8_t marker = 0;
  uint32_t marker_offset = 0;
};

// The socket index the attached program returns for `datagram` (bytes long), exactly as the
// program computes it; 0 for sockets == 0. For tests and for checking a datagram's owner.
[[nodiscard]] uint32_t steered_socket(const ReuseportKey& key, const uint8_t* datagram,
                                      uint32_t bytes, uint32_t sockets) noexcept;

// Attaches the program for `sockets` (1..kMaxSteeredSockets) members to fd's reuseport group
// (any member may attach; the group keeps the last, identical, program). kInvalidArgument for
// a bad count, kIo naming `what` and the errno text when the kernel refuses.
Result<void> attach_reuseport_steering(int fd, const ReuseportKey& key, uint32_t sockets,
                                       std::string_view what);

}  // namespace detwan::common
