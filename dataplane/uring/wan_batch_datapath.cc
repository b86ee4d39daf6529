// UDP GSO batches and GRO receives on the WAN sockets (wan_batch.h): building, sending and
// completing the batches; receiving merged runs and cutting them into frames.
// Per packet: no allocation, no exception, no logging; failures are counted in PortIo.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <liburing.h>
#include <poll.h>

#include "dataplane/uring/datapath.h"

namespace detwan::dataplane::uring {
namespace {

bool same_endpoint(const gw::Endpoint& a, const gw::Endpoint& b) noexcept {
  return a.ipv6 == b.ipv6 && a.port == b.port &&
         std::memcmp(a.address, b.address, a.ipv6 ? 16 : 4) == 0;
}

bool joins(const GsoSend& batch, uint32_t port, std::size_t size, const gw::Endpoint& destination,
           int dscp) noexcept {
  return batch.port == port && !batch.closed && batch.count < kMaxGsoSegments &&
         size <= batch.segment_bytes && batch.bytes + size <= kMaxGsoBytes && batch.dscp == dscp &&
         same_endpoint(batch.destination, destination);
}

// A route that cannot take a batch as a whole: GSO is turned off for the port.
bool refusal(int32_t result) noexcept {
  return result == -EIO || result == -EMSGSIZE || result == -EINVAL || result == -EOPNOTSUPP;
}

}  // namespace

void Datapath::queue_wan(uint32_t port, uint32_t buffer, std::span<const std::byte> bytes,
                         const gw::Endpoint& destination, uint8_t dscp) noexcept {
  if (state_.gso_enabled[port] == 0) {
    send_wan(port, buffer, bytes, destination, dscp);
    return;
  }
  if (open_batch_ >= 0) {
    GsoSend& open = state_.gso_sends[static_cast<uint32_t>(open_batch_)];
    if (joins(open, port, bytes.size(), destination, dscp)) {
      open.vectors[open.count] = {const_cast<std::byte*>(bytes.data()), bytes.size()};
      open.buffers[open.count] = buffer;
      ++open.count;
      open.bytes += static_cast<uint32_t>(bytes.size());
      open.closed = bytes.size() < open.segment_bytes;
      return;
    }
    flush_wan_batch();
  }
  int32_t free_record = -1;
  for (uint32_t i = 0; i < state_.gso_sends.size(); ++i) {
    if (!state_.gso_sends[i].in_use) {
      free_record = static_cast<int32_t>(i);
      break;
    }
  }
  if (free_record < 0) {  // every batch is in flight: this frame goes alone
    send_wan(port, buffer, bytes, destination, dscp);
    return;
  }
  GsoSend& batch = state_.gso_sends[static_cast<uint32_t>(free_record)];
  batch.in_use = true;
  batch.port = port;
  batch.destination = destination;
  batch.dscp = dscp;
  batch.segment_bytes = static_cast<uint32_t>(bytes.size());
  batch.vectors[0] = {const_cast<std::byte*>(bytes.data()), bytes.size()};
  batch.buffers[0] = buffer;
  batch.count = 1;
  batch.bytes = batch.segment_bytes;
  batch.closed = false;
  open_batch_ = free_record;
}

void Datapath::flush_wan_batch() noexcept {
  if (open_batch_ < 0) return;
  const auto record = static_cast<uint32_t>(open_batch_);
  GsoSend& batch = state_.gso_sends[record];
  open_batch_ = -1;
  if (batch.count == 1) {  // a single frame leaves as it always did, from its own buffer
    batch.in_use = false;
    send_wan(batch.port, batch.buffers[0],
             {static_cast<const std::byte*>(batch.vectors[0].iov_base), batch.vectors[0].iov_len},
             batch.destination, static_cast<uint8_t>(batch.dscp));
    return;
  }
  io_uring_sqe* sqe = get_sqe();
  socklen_t address_length = 0;
  const UdpSocket& socket = state_.wan[batch.port];
  if (sqe == nullptr ||
      !to_sockaddr(batch.destination, socket.ipv6(), &batch.address, &address_length)) {
    engine_.port_io(batch.port).tx_errors += batch.count;
    for (uint32_t i = 0; i < batch.count; ++i) pool_.release(batch.buffers[i]);
    batch.in_use = false;
    return;
  }
  batch.message = msghdr{};
  batch.message.msg_name = &batch.address;
  batch.message.msg_namelen = address_length;
  batch.message.msg_iov = batch.vectors;
  batch.message.msg_iovlen = batch.count;
  batch.message.msg_control = batch.control;
  batch.message.msg_controllen = sizeof batch.control;
  std::memset(batch.control, 0, sizeof batch.control);
  cmsghdr* header = CMSG_FIRSTHDR(&batch.message);
  std::size_t used = 0;
  if (batch.dscp >= 0) {
    const int traffic_class = (batch.dscp & 0x3F) << 2;
    header->cmsg_level = batch.destination.ipv6 ? IPPROTO_IPV6 : IPPROTO_IP;
    header->cmsg_type = batch.destination.ipv6 ? IPV6_TCLASS : IP_TOS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &traffic_class, sizeof traffic_class);
    used += CMSG_SPACE(sizeof(int));
    header = CMSG_NXTHDR(&batch.message, header);
  }
  const auto segment = static_cast<uint16_t>(batch.segment_bytes);
  header->cmsg_level = SOL_UDP;
  header->cmsg_type = UDP_SEGMENT;
  header->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  std::memcpy(CMSG_DATA(header), &segment, sizeof segment);
  used += CMSG_SPACE(sizeof(uint16_t));
  batch.message.msg_controllen = used;
  io_uring_prep_sendmsg(sqe, socket.fd(), &batch.message, 0);
  io_uring_sqe_set_data64(sqe, pack(Op::kWanGsoSend, batch.port, record));
}

void Datapath::on_gso_send(uint32_t port, uint32_t record, int32_t result) noexcept {
  if (record >= state_.gso_sends.size()) return;
  GsoSend& batch = state_.gso_sends[record];
  gw::PortIo& io = engine_.port_io(port);
  if (result >= 0) {
    io.tx_packets += batch.count;
    io.tx_bytes += static_cast<uint64_t>(result);
    ++io.tx_batches;
    for (uint32_t i = 0; i < batch.count; ++i) pool_.release(batch.buffers[i]);
  } else if (refusal(result)) {
    // The frames are still in their buffers: they go again one by one, and so does every later
    // frame of this port.
    ++io.gso_refused;
    state_.gso_enabled[port] = 0;
    for (uint32_t i = 0; i < batch.count; ++i) {
      send_wan(port, batch.buffers[i],
               {static_cast<const std::byte*>(batch.vectors[i].iov_base), batch.vectors[i].iov_len},
               batch.destination, static_cast<uint8_t>(batch.dscp));
    }
  } else {
    io.tx_errors += batch.count;
    for (uint32_t i = 0; i < batch.count; ++i) pool_.release(batch.buffers[i]);
  }
  batch.in_use = false;
}

bool Datapath::submit_large_receive(uint32_t source_id, uint32_t record) noexcept {
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) return false;
  LargeReceive& receive = state_.large_receives[record];
  const Source& source = sources_[source_id];
  if (source.kind == SourceKind::kTun) {
    io_uring_prep_read(sqe, source.fd, receive.data, kLargeBufferBytes, 0);
    io_uring_sqe_set_data64(sqe, pack(Op::kReceive, source_id, record));
    receive.in_flight = true;
    return true;
  }
  receive.vector = {receive.data, kLargeBufferBytes};
  receive.message = msghdr{};
  receive.message.msg_name = &receive.address;
  receive.message.msg_namelen = sizeof receive.address;
  receive.message.msg_iov = &receive.vector;
  receive.message.msg_iovlen = 1;
  receive.message.msg_control = receive.control;
  receive.message.msg_controllen = sizeof receive.control;
  io_uring_prep_recvmsg(sqe, source.fd, &receive.message, MSG_TRUNC);
  io_uring_sqe_set_data64(sqe, pack(Op::kReceive, source_id, record));
  receive.in_flight = true;
  return true;
}

void Datapath::arm_large(uint32_t source_id) noexcept {
  Source& source = sources_[source_id];
  for (uint32_t record = source.large_first;
       record < source.large_first + source.depth && source.armed < source.depth; ++record) {
    if (state_.large_receives[record].in_flight) continue;
    if (!submit_large_receive(source_id, record)) {
      starved_ = true;
      return;
    }
    ++source.armed;
  }
}

bool Datapath::large_receive_ended(uint32_t source_id, uint32_t record, int32_t result) noexcept {
  if (result == -EAGAIN || result == -EINTR) {
    io_uring_sqe* sqe = get_sqe();  // wait for readiness, then receive again (as on_receive)
    if (sqe != nullptr) {
      io_uring_prep_poll_add(sqe, sources_[source_id].fd, POLLIN);
      io_uring_sqe_set_data64(sqe, pack(Op::kReadiness, source_id, record));
      return true;
    }
  }
  if (result == -ECANCELED || result == -EAGAIN || result == -EINTR) {
    state_.large_receives[record].in_flight = false;
    --sources_[source_id].armed;
    starved_ = true;
    return true;
  }
  return false;
}

void Datapath::rearm_large(uint32_t source_id, uint32_t record) noexcept {
  if (!submit_large_receive(source_id, record)) {
    state_.large_receives[record].in_flight = false;
    --sources_[source_id].armed;
    starved_ = true;
  }
}

void Datapath::on_gro_receive(uint32_t source_id, uint32_t record, int32_t result,
                              int64_t now_ns) noexcept {
  if (large_receive_ended(source_id, record, result)) return;
  const Source& source = sources_[source_id];
  LargeReceive& receive = state_.large_receives[record];
  gw::PortIo& io = engine_.port_io(source.index);
  if (result < 0 || static_cast<uint32_t>(result) > kLargeBufferBytes ||
      (receive.message.msg_flags & MSG_TRUNC) != 0) {
    ++io.rx_errors;  // failed, or truncated (no merged run is larger than the buffer)
  } else {
    const auto length = static_cast<uint32_t>(result);
    uint32_t segment = length;  // no control message: one datagram
    for (cmsghdr* c = CMSG_FIRSTHDR(&receive.message); c != nullptr;
         c = CMSG_NXTHDR(&receive.message, c)) {
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        int size = 0;
        std::memcpy(&size, CMSG_DATA(c), sizeof size);
        if (size > 0) segment = static_cast<uint32_t>(size);
      }
    }
    if (segment < length) ++io.rx_batches;
    // Each datagram of the run into a pool buffer of its own: the engine holds it until its
    // release like any received frame.
    for (uint32_t offset = 0; offset < length; offset += segment) {
      const uint32_t bytes = std::min(segment, length - offset);
      const uint32_t buffer = pool_.alloc();
      if (buffer == kNoBuffer) {
        ++io.no_buffer;  // lost: counted per datagram
        continue;
      }
      if (bytes > pool_.whole(buffer).size()) {
        ++io.rx_errors;
        pool_.release(buffer);
        continue;
      }
      pool_.info(buffer).offset = 0;
      std::memcpy(pool_.data(buffer), receive.data + offset, bytes);
      if (wan_datagram(source.index, receive.address, buffer, bytes, now_ns) !=
          common::Status::kOk) {
        pool_.release(buffer);
      }
    }
  }
  rearm_large(source_id, record);
}

}  // namespace detwan::dataplane::uring
