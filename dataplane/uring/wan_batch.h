#pragma once
// UDP GSO and GRO on the WAN sockets of the io_uring backend (private to dataplane/uring).
//
// Send (GSO, gateway.wan_gso):
// Frames that leave in the same loop round, on one port, to one peer, with one DSCP and one size
// (the last may be shorter) go out in one sendmsg with UDP_SEGMENT: the kernel builds the run of
// datagrams from one skb, one system call and one pass through the UDP/IP stack instead of one
// per frame, and a receiver with UDP_GRO (or a NIC with USO) keeps them together. Nothing waits
// for a batch: it is closed when the round's due frames have been handed out, so every frame
// still leaves in the round its slot released it (docs/gateway.md, "WAN sends in batches").
//
// A route that refuses a batch as a whole (EIO: no checksum offload on old kernels; EMSGSIZE or
// EINVAL: a segment above the path MTU) turns GSO off for that port, and the batch's frames are
// sent again one by one: nothing is lost (PortIo::gso_refused counts it).
//
// Receive (GRO, gateway.wan_gro): the WAN socket has UDP_GRO set, so a run of equal-size
// datagrams from one peer (a GSO batch of the far gateway, or what a NIC's GRO merged) arrives
// in one recvmsg into a 64 KiB LargeReceive buffer with its segment size in a control message. The
// loop cuts it into frames, each copied into a pool buffer the engine then holds like any other
// received frame (PortIo::rx_batches counts the receives that carried several).
#include <cstddef>
#include <cstdint>

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "dataplane/gw/config.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103  // linux/udp.h; older libc headers lack them
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace detwan::dataplane::uring {

inline constexpr uint32_t kMaxGsoSegments = 64;   // UDP_MAX_SEGMENTS of older kernels
inline constexpr uint32_t kMaxGsoBytes = 65'000;  // below 65,507, the largest UDP payload
inline constexpr uint32_t kGsoSendRecords = 32;   // batches in flight at once

// One sendmsg with UDP_SEGMENT, built while frames join it and then in flight until its
// completion; the frames' buffers stay held until then.
struct GsoSend {
  msghdr message{};
  sockaddr_storage address{};
  alignas(
      cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint16_t))] = {};
  iovec vectors[kMaxGsoSegments]{};
  uint32_t buffers[kMaxGsoSegments]{};
  gw::Endpoint destination;
  uint32_t count = 0;
  uint32_t bytes = 0;
  uint32_t segment_bytes = 0;
  uint32_t port = 0;
  int dscp = -1;
  bool closed = false;  // a shorter frame ended it
  bool in_use = false;
};

// One recvmsg of a WAN port with UDP_GRO, or one read of a TUN device with offload, in flight
// into its own buffer (never a pool buffer: a merged run or a GSO packet is up to 64 KiB).
// Holds a merged UDP run (at most 65,535 bytes) or a TUN read (a virtio-net header and a packet
// of at most 65,535 bytes).
inline constexpr uint32_t kLargeBufferBytes = 65'536 + 64;
struct LargeReceive {
  msghdr message{};
  iovec vector{};
  sockaddr_storage address{};
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int))] = {};
  std::byte* data = nullptr;  // kLargeBufferBytes in GatewayState::large_memory
  bool in_flight = false;
};

}  // namespace detwan::dataplane::uring
