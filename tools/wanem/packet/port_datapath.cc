// Hot path of the AF_PACKET backend: no exceptions, no allocation, no logging.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include <linux/if_packet.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "tools/wanem/packet/port.h"
#include "tools/wanem/run_loop.h"

namespace detwan::wanem::packet {
namespace {

int64_t read_clock_ns(clockid_t clock) noexcept {
  timespec now{};
  clock_gettime(clock, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

}  // namespace

// CLOCK_MONOTONIC - CLOCK_REALTIME, read as realtime between two monotonic reads; a sample
// whose bracket is wide (the thread was preempted between the reads) would shift arrival times
// by the preemption, so the narrowest of a few is kept. Refreshed every kOffsetRefreshNs to
// follow realtime steps.
int64_t PacketPort::realtime_to_monotonic_ns() noexcept {
  constexpr int64_t kOffsetRefreshNs = 100'000'000;
  constexpr int64_t kGoodBracketNs = 2'000;
  const int64_t now_ns = read_clock_ns(CLOCK_MONOTONIC);
  if (offset_valid_ && now_ns - offset_read_ns_ < kOffsetRefreshNs) return offset_ns_;
  int64_t best_width_ns = INT64_MAX;
  for (int attempt = 0; attempt < 4 && best_width_ns > kGoodBracketNs; ++attempt) {
    const int64_t before_ns = read_clock_ns(CLOCK_MONOTONIC);
    const int64_t real_ns = read_clock_ns(CLOCK_REALTIME);
    const int64_t after_ns = read_clock_ns(CLOCK_MONOTONIC);
    if (after_ns - before_ns < best_width_ns) {
      best_width_ns = after_ns - before_ns;
      offset_ns_ = before_ns + (after_ns - before_ns) / 2 - real_ns;
    }
  }
  offset_valid_ = true;
  offset_read_ns_ = now_ns;
  return offset_ns_;
}

static_assert(Port<PacketPort>);

uint32_t PacketPort::rx_burst(Side side, uint64_t* handles, uint32_t count) noexcept {
  if (ring_[index_of(side)].frames != 0) return rx_burst_ring(side, handles, count);
  const uint32_t wanted = std::min({count, kMaxBurst, free_count_});
  if (wanted == 0) {
    (void)drain_without_buffers(side);
    return 0;
  }
  for (uint32_t i = 0; i < wanted; ++i) {
    const uint32_t index = free_[--free_count_];
    rx_index_[i] = index;
    rx_iov_[i][1].iov_base = buffer(index);
    rx_iov_[i][1].iov_len = buffer_bytes_;
    rx_msgs_[i].msg_hdr.msg_controllen = sizeof rx_control_[i];
  }
  // MSG_TRUNC: msg_len reports the real frame length, so oversize frames are recognised.
  int got =
      ::recvmmsg(fd_[index_of(side)].get(), rx_msgs_, wanted, MSG_DONTWAIT | MSG_TRUNC, nullptr);
  if (got < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      counters_.count_drop(PortDrop::kRxError);
    }
    got = 0;
  }
  SideCounters& side_counters = counters_.side[index_of(side)];
  // Kernel timestamps are CLOCK_REALTIME; the forwarder runs on CLOCK_MONOTONIC.
  const int64_t to_monotonic_ns = got > 0 ? realtime_to_monotonic_ns() : 0;
  uint32_t out = 0;
  for (uint32_t i = 0; i < static_cast<uint32_t>(got); ++i) {
    const uint32_t index = rx_index_[i];
    const uint32_t received = rx_msgs_[i].msg_len;
    if ((rx_msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 || received < sizeof(VnetHeader) ||
        received - sizeof(VnetHeader) > buffer_bytes_) {
      counters_.count_drop(PortDrop::kOversize);
      free_[free_count_++] = index;
      continue;
    }
    const auto length = static_cast<uint32_t>(received - sizeof(VnetHeader));
    if ((rx_vnet_[i].flags & kVnetNeedsChecksum) != 0) {
      complete_checksum(buffer(index), length, rx_vnet_[i]);
    }
    lengths_[index] = length;
    arrival_ns_[index] = 0;
    const msghdr& header = rx_msgs_[i].msg_hdr;
    for (const cmsghdr* cmsg = CMSG_FIRSTHDR(&header); cmsg != nullptr;
         cmsg = CMSG_NXTHDR(const_cast<msghdr*>(&header), const_cast<cmsghdr*>(cmsg))) {
      if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_TIMESTAMPNS) {
        timespec stamp{};
        std::memcpy(&stamp, CMSG_DATA(cmsg), sizeof stamp);
        arrival_ns_[index] = stamp.tv_sec * 1'000'000'000LL + stamp.tv_nsec + to_monotonic_ns;
      }
    }
    handles[out++] = index;
    ++side_counters.rx_packets;
    side_counters.rx_bytes += length;
  }
  for (uint32_t i = static_cast<uint32_t>(got); i < wanted; ++i)
    free_[free_count_++] = rx_index_[i];
  return out;
}

uint32_t PacketPort::rx_burst_ring(Side side, uint64_t* handles, uint32_t count) noexcept {
  RxRing& ring = ring_[index_of(side)];
  SideCounters& side_counters = counters_.side[index_of(side)];
  const uint32_t wanted = std::min(count, kMaxBurst);
  int64_t to_monotonic_ns = 0;
  uint32_t out = 0;
  while (out < wanted) {
    const uint32_t slot = ring.next;
    // A slot we still hold is one the kernel has not written (it never writes a held slot);
    // kSpillAhead keeps that from happening while frames keep arriving.
    if (ring.holder[slot] != kNoHolder) break;
    auto* header = reinterpret_cast<tpacket2_hdr*>(slot_address(ring, slot));
    if ((__atomic_load_n(&header->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) == 0) break;
    ring.next = slot + 1 == ring.frames ? 0 : slot + 1;
    uint8_t* frame = reinterpret_cast<uint8_t*>(header) + header->tp_mac;
    const uint32_t length = header->tp_snaplen;
    if (header->tp_snaplen < header->tp_len || header->tp_mac < sizeof(VnetHeader) ||
        length > buffer_bytes_) {
      counters_.count_drop(PortDrop::kOversize);
      __atomic_store_n(&header->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      continue;
    }
    if (free_count_ == 0) {
      counters_.count_drop(PortDrop::kPoolEmpty);
      __atomic_store_n(&header->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      continue;
    }
    const uint32_t descriptor = free_[--free_count_];
    VnetHeader vnet;
    std::memcpy(&vnet, frame - sizeof(VnetHeader), sizeof vnet);
    if ((vnet.flags & kVnetNeedsChecksum) != 0) complete_checksum(frame, length, vnet);
    if (to_monotonic_ns == 0) to_monotonic_ns = realtime_to_monotonic_ns();
    data_[descriptor] = frame;
    ring_slot_[descriptor] = static_cast<uint32_t>(index_of(side)) << kSideShift | slot;
    ring.holder[slot] = descriptor;
    lengths_[descriptor] = length;
    arrival_ns_[descriptor] =
        int64_t{header->tp_sec} * 1'000'000'000LL + header->tp_nsec + to_monotonic_ns;
    handles[out++] = descriptor;
    ++side_counters.rx_packets;
    side_counters.rx_bytes += length;
    ++counters_.rx_in_place;
  }
  // poll() says readable while the slot the kernel wrote last is not back with it. Once every
  // written frame is read, give the last one its own copy, so the loop sleeps until the next
  // frame (with more frames waiting, poll() is right to say so).
  const auto* next = reinterpret_cast<const tpacket2_hdr*>(slot_address(ring, ring.next));
  if ((__atomic_load_n(&next->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) == 0 ||
      ring.holder[ring.next] != kNoHolder) {
    const uint32_t last = ring.next == 0 ? ring.frames - 1 : ring.next - 1;
    if (ring.holder[last] != kNoHolder) spill(ring, last);
  }
  // The kernel's next slots must be free when it gets there.
  for (uint32_t k = 0, slot = ring.next; k < kSpillAhead && k < ring.frames; ++k) {
    if (ring.holder[slot] != kNoHolder) spill(ring, slot);
    slot = slot + 1 == ring.frames ? 0 : slot + 1;
  }
  return out;
}

void PacketPort::release_slot(uint32_t descriptor) noexcept {
  const uint32_t code = ring_slot_[descriptor];
  RxRing& ring = ring_[code >> kSideShift];
  const uint32_t slot = code & ((1U << kSideShift) - 1);
  ring.holder[slot] = kNoHolder;
  ring_slot_[descriptor] = kNoSlot;
  data_[descriptor] = buffer(descriptor);
  auto* header = reinterpret_cast<tpacket2_hdr*>(slot_address(ring, slot));
  __atomic_store_n(&header->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
}

void PacketPort::spill(RxRing& ring, uint32_t slot) noexcept {
  const uint32_t descriptor = ring.holder[slot];
  std::memcpy(buffer(descriptor), data_[descriptor], lengths_[descriptor]);
  release_slot(descriptor);  // data_ now points at the copy
  ++counters_.rx_spilled;
}

uint32_t PacketPort::drain_without_buffers(Side side) noexcept {
  for (uint32_t i = 0; i < kMaxBurst; ++i) {
    rx_iov_[i][1].iov_base = scratch_.data();
    rx_iov_[i][1].iov_len = scratch_.size();
  }
  const int got =
      ::recvmmsg(fd_[index_of(side)].get(), rx_msgs_, kMaxBurst, MSG_DONTWAIT | MSG_TRUNC, nullptr);
  if (got <= 0) return 0;
  counters_.count_drop(PortDrop::kPoolEmpty, static_cast<uint64_t>(got));
  return static_cast<uint32_t>(got);
}

uint32_t PacketPort::tx_burst(Side side, const uint64_t* handles, uint32_t count) noexcept {
  count = std::min(count, kMaxBurst);
  for (uint32_t i = 0; i < count; ++i) {
    tx_iov_[i][1].iov_base = data_[handles[i]];
    tx_iov_[i][1].iov_len = lengths_[handles[i]];
  }
  const int fd = fd_[index_of(side)].get();
  SideCounters& side_counters = counters_.side[index_of(side)];
  uint32_t done = 0;
  while (done < count) {
    const int sent = ::sendmmsg(fd, tx_msgs_ + done, count - done, MSG_DONTWAIT);
    if (sent > 0) {
      for (uint32_t i = done; i < done + static_cast<uint32_t>(sent); ++i) {
        ++side_counters.tx_packets;
        side_counters.tx_bytes += lengths_[handles[i]];
        free(handles[i]);
      }
      done += static_cast<uint32_t>(sent);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS || errno == EINTR) break;
    // This frame cannot be sent (e.g. EMSGSIZE, ENETDOWN): drop it, go on with the next.
    counters_.count_drop(PortDrop::kTxError);
    free(handles[done]);
    ++done;
  }
  return done;
}

// The checksum field already holds the pseudo-header sum; add the one's-complement sum of
// everything from csum_start to the end and store its complement (skb_checksum_help()).
void PacketPort::complete_checksum(uint8_t* frame, uint32_t length,
                                   const VnetHeader& vnet) noexcept {
  const uint32_t start = vnet.csum_start;
  const uint32_t field = start + vnet.csum_offset;
  if (start >= length || field + 2 > length) return;  // inconsistent hint: leave the frame
  uint64_t sum = 0;
  uint32_t i = start;
  for (; i + 1 < length; i += 2) sum += static_cast<uint32_t>(frame[i] << 8 | frame[i + 1]);
  if (i < length) sum += static_cast<uint32_t>(frame[i] << 8);
  while ((sum >> 16) != 0) sum = (sum & 0xffff) + (sum >> 16);
  auto checksum = static_cast<uint16_t>(~sum & 0xffff);
  // UDP sends a computed 0 as 0xffff (0 means "no checksum"); harmless for TCP.
  if (checksum == 0 && vnet.csum_offset == 6) checksum = 0xffff;
  frame[field] = static_cast<uint8_t>(checksum >> 8);
  frame[field + 1] = static_cast<uint8_t>(checksum & 0xff);
}

common::Status PacketPort::clone(uint64_t handle, uint64_t* copy) noexcept {
  if (free_count_ == 0) return common::Status::kBusy;
  const uint32_t index = free_[--free_count_];
  std::memcpy(buffer(index), data_[handle], lengths_[handle]);
  lengths_[index] = lengths_[handle];
  *copy = index;
  return common::Status::kOk;
}

common::Result<RunOutcome> forward(PacketPort& port, const BackendRun& run) {
  const common::MonotonicClock clock;
  return run_forwarding(port, clock, run, port.pool_frames(), "packet");
}

}  // namespace detwan::wanem::packet
