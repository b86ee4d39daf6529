// TUN offload (tun_offload.h): parsing a read, cutting a UDP GSO run into packets, completing
// partial checksums, and the loop's handling of such a read; on the write side, joining the
// packets released in one round into UDP GSO runs. Per packet: no allocation, no exception, no
// logging; failures are counted in LocalIo.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dataplane/gw/tun.h"
#include "dataplane/uring/datapath.h"
#include "dataplane/uring/tun_offload.h"
#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/checksum.h"

namespace detwan::dataplane::uring {
namespace {

using wire::load_be16;
using wire::store_be16;

constexpr uint32_t kIpv4HeaderBytes = 20;
constexpr uint32_t kIpv6HeaderBytes = 40;
constexpr uint32_t kUdpHeaderBytes = 8;
constexpr uint32_t kMaxSegments = 64;

// The checksum field's final value from a one's-complement sum: folded and inverted; a UDP
// checksum of 0 is sent as 0xFFFF (RFC 768), which is the same value in one's complement.
uint16_t finish(uint64_t sum) noexcept {
  const auto value = static_cast<uint16_t>(~wire::fold(sum));
  return value == 0 ? 0xFFFF : value;
}

void store_native16(std::byte* p, uint16_t value) noexcept { std::memcpy(p, &value, 2); }

}  // namespace

bool parse_tun_read(std::span<const std::byte> read, uint32_t header_bytes, TunRead* out) noexcept {
  if (read.size() <= header_bytes || header_bytes < gw::kVnetHeaderBytes) return false;
  gw::VnetHeader vnet;
  std::memcpy(&vnet, read.data(), sizeof vnet);
  *out = TunRead{};
  out->packet = read.subspan(header_bytes);
  const std::byte* ip = out->packet.data();
  const auto bytes = static_cast<uint32_t>(out->packet.size());
  const uint8_t version = std::to_integer<uint8_t>(ip[0]) >> 4;
  out->ipv6 = version == 6;
  const uint8_t gso_type = vnet.gso_type & static_cast<uint8_t>(~gw::kVnetGsoEcn);
  if (gso_type == gw::kVnetGsoNone) {
    if ((vnet.flags & gw::kVnetNeedsChecksum) != 0) {
      if (uint32_t{vnet.csum_start} + vnet.csum_offset + 2u > bytes) return false;
      out->needs_checksum = true;
      out->csum_start = vnet.csum_start;
      out->csum_offset = vnet.csum_offset;
    }
    return true;
  }
  if (gso_type != gw::kVnetGsoUdpL4 || vnet.gso_size == 0) return false;
  uint32_t ip_bytes = 0;
  if (version == 4) {
    if (bytes < kIpv4HeaderBytes) return false;
    ip_bytes = (std::to_integer<uint32_t>(ip[0]) & 0x0Fu) * 4u;
    if (ip_bytes < kIpv4HeaderBytes || std::to_integer<uint8_t>(ip[9]) != wire::kIpProtoUdpNumber ||
        (load_be16(ip + 6) & 0x3FFFu) != 0) {
      return false;
    }
  } else if (version == 6) {
    ip_bytes = kIpv6HeaderBytes;
    if (bytes < ip_bytes || std::to_integer<uint8_t>(ip[6]) != wire::kIpProtoUdpNumber)
      return false;
  } else {
    return false;
  }
  out->header_bytes = ip_bytes + kUdpHeaderBytes;
  if (bytes <= out->header_bytes) return false;
  const uint32_t payload = bytes - out->header_bytes;
  out->gso = true;
  out->segment_bytes = vnet.gso_size;
  out->segments = (payload + out->segment_bytes - 1) / out->segment_bytes;
  return out->segments <= kMaxSegments;
}

uint32_t build_tun_packet(const TunRead& read, uint32_t index, std::span<std::byte> out) noexcept {
  if (!read.gso) {
    const auto bytes = static_cast<uint32_t>(read.packet.size());
    if (index != 0 || bytes > out.size()) return 0;
    std::memcpy(out.data(), read.packet.data(), bytes);
    if (read.needs_checksum) {
      // The field holds the pseudo-header sum: summing from csum_start over it completes it.
      std::byte* field = out.data() + read.csum_start + read.csum_offset;
      const uint16_t value =
          finish(wire::sum_native(out.data() + read.csum_start, bytes - read.csum_start));
      store_native16(field, value);
    }
    return bytes;
  }
  const auto payload_total = static_cast<uint32_t>(read.packet.size()) - read.header_bytes;
  const uint32_t first = index * read.segment_bytes;
  if (index >= read.segments || first >= payload_total) return 0;
  const uint32_t payload = std::min(read.segment_bytes, payload_total - first);
  const uint32_t bytes = read.header_bytes + payload;
  if (bytes > out.size()) return 0;
  std::byte* p = out.data();
  std::memcpy(p, read.packet.data(), read.header_bytes);
  std::memcpy(p + read.header_bytes, read.packet.data() + read.header_bytes + first, payload);
  const uint32_t ip_bytes = read.header_bytes - kUdpHeaderBytes;
  std::byte* udp = p + ip_bytes;
  const uint32_t udp_bytes = kUdpHeaderBytes + payload;
  const std::byte* source = nullptr;
  const std::byte* destination = nullptr;
  if (read.ipv6) {
    store_be16(p + 4, static_cast<uint16_t>(udp_bytes));
    source = p + 8;
    destination = p + 24;
  } else {
    store_be16(p + 2, static_cast<uint16_t>(bytes));
    store_be16(p + 4, static_cast<uint16_t>(load_be16(p + 4) + index));
    store_be16(p + 10, 0);
    store_native16(p + 10, static_cast<uint16_t>(~wire::fold(wire::sum_native(p, ip_bytes))));
    source = p + 12;
    destination = p + 16;
  }
  store_be16(udp + 4, static_cast<uint16_t>(udp_bytes));
  store_be16(udp + 6, 0);
  store_native16(udp + 6,
                 finish(wire::pseudo_header_sum(read.ipv6, source, destination, udp_bytes) +
                        wire::sum_native(udp, udp_bytes)));
  return bytes;
}

uint32_t tun_run_header_bytes(std::span<const std::byte> packet) noexcept {
  const auto bytes = static_cast<uint32_t>(packet.size());
  if (bytes < kIpv4HeaderBytes + kUdpHeaderBytes) return 0;
  const std::byte* ip = packet.data();
  uint32_t ip_bytes = 0;
  switch (std::to_integer<uint8_t>(ip[0])) {
    case 0x45:  // IPv4, no options
      if (std::to_integer<uint8_t>(ip[9]) != wire::kIpProtoUdpNumber ||
          (load_be16(ip + 6) & 0x3FFFu) != 0 || load_be16(ip + 2) != bytes) {
        return 0;  // not UDP, a fragment, or a total length that is not the packet's
      }
      ip_bytes = kIpv4HeaderBytes;
      break;
    default:
      if ((std::to_integer<uint8_t>(ip[0]) >> 4) != 6 ||
          bytes < kIpv6HeaderBytes + kUdpHeaderBytes ||
          std::to_integer<uint8_t>(ip[6]) != wire::kIpProtoUdpNumber ||
          load_be16(ip + 4) != bytes - kIpv6HeaderBytes) {
        return 0;
      }
      ip_bytes = kIpv6HeaderBytes;
      break;
  }
  const uint32_t header_bytes = ip_bytes + kUdpHeaderBytes;
  if (bytes <= header_bytes || load_be16(ip + ip_bytes + 4) != bytes - ip_bytes) return 0;
  return header_bytes;
}

bool tun_run_same_flow(const std::byte* first, const std::byte* packet,
                       uint32_t header_bytes) noexcept {
  const std::byte* first_udp = first + header_bytes - kUdpHeaderBytes;
  const std::byte* udp = packet + header_bytes - kUdpHeaderBytes;
  if (std::memcmp(first_udp, udp, 4) != 0) return false;  // ports
  if (header_bytes == kIpv4HeaderBytes + kUdpHeaderBytes) {
    // version/IHL and TOS; flags/fragment, TTL and protocol; addresses
    return std::memcmp(first, packet, 2) == 0 && std::memcmp(first + 6, packet + 6, 4) == 0 &&
           std::memcmp(first + 12, packet + 12, 8) == 0;
  }
  // version, traffic class and flow label; next header and hop limit; addresses
  return std::memcmp(first, packet, 4) == 0 && std::memcmp(first + 6, packet + 6, 34) == 0;
}

void write_tun_run_header(std::byte* vnet, uint32_t vnet_bytes, std::byte* packet,
                          uint32_t header_bytes, uint32_t segment_bytes,
                          uint32_t payload_bytes) noexcept {
  const uint32_t ip_bytes = header_bytes - kUdpHeaderBytes;
  const bool ipv6 = ip_bytes == kIpv6HeaderBytes;
  const uint32_t udp_bytes = kUdpHeaderBytes + payload_bytes;
  std::byte* udp = packet + ip_bytes;
  if (ipv6) {
    store_be16(packet + 4, static_cast<uint16_t>(udp_bytes));
  } else {
    store_be16(packet + 2, static_cast<uint16_t>(ip_bytes + udp_bytes));
    store_be16(packet + 10, 0);
    store_native16(packet + 10,
                   static_cast<uint16_t>(~wire::fold(wire::sum_native(packet, ip_bytes))));
  }
  store_be16(udp + 4, static_cast<uint16_t>(udp_bytes));
  // Partial: the pseudo-header sum, not inverted; the kernel adds each segment's header and
  // payload (RFC 1071 incremental form) when it cuts the run.
  store_native16(udp + 6,
                 wire::fold(wire::pseudo_header_sum(ipv6, packet + (ipv6 ? 8 : 12),
                                                    packet + (ipv6 ? 24 : 16), udp_bytes)));
  gw::VnetHeader header;
  header.flags = gw::kVnetNeedsChecksum;
  header.gso_type = gw::kVnetGsoUdpL4;
  header.header_bytes = static_cast<uint16_t>(header_bytes);
  header.gso_size = static_cast<uint16_t>(segment_bytes);
  header.csum_start = static_cast<uint16_t>(ip_bytes);
  header.csum_offset = 6;  // offsetof(udphdr, check)
  std::memset(vnet, 0, vnet_bytes);
  std::memcpy(vnet, &header, sizeof header);
}

void Datapath::on_tun_read(uint32_t source_id, uint32_t record, int32_t result,
                           int64_t now_ns) noexcept {
  if (large_receive_ended(source_id, record, result)) return;
  LargeReceive& receive = state_.large_receives[record];
  gw::LocalIo& io = engine_.local_io();
  TunRead read;
  if (result < 0 ||
      !parse_tun_read({receive.data, static_cast<std::size_t>(std::min<int32_t>(
                                         result, static_cast<int32_t>(kLargeBufferBytes)))},
                      tun_header_bytes_, &read)) {
    ++io.tun_rx_errors;
  } else {
    if (read.segments > 1) ++io.tun_rx_batches;
    for (uint32_t k = 0; k < read.segments; ++k) {
      const uint32_t buffer = pool_.alloc();
      if (buffer == kNoBuffer) {
        ++io.tun_rx_errors;  // no buffer for this packet of the run: lost, counted
        continue;
      }
      pool_.info(buffer).offset = kHeadroomBytes;
      const uint32_t length = build_tun_packet(
          read, k, pool_.whole(buffer).subspan(kHeadroomBytes, pool_.payload_capacity_bytes()));
      if (length == 0) {
        ++io.tun_rx_errors;  // larger than a packet buffer: larger than the TUN MTU allows
        pool_.release(buffer);
        continue;
      }
      if (tun_packet(buffer, length, now_ns) != common::Status::kOk) pool_.release(buffer);
    }
  }
  rearm_large(source_id, record);
}

void Datapath::write_tun(uint32_t buffer) noexcept {
  const BufferInfo& info = pool_.info(buffer);
  io_uring_sqe* sqe = nullptr;
  if (state_.tun_fd < 0 || info.offset < tun_header_bytes_ || (sqe = get_sqe()) == nullptr) {
    ++engine_.local_io().tun_tx_errors;
    pool_.release(buffer);
    return;
  }
  // With offload the packet goes behind a virtio-net header of zeros (no GSO, checksum complete),
  // written into the bytes before the payload (the tunnel header's room).
  std::byte* start = pool_.payload(buffer) - tun_header_bytes_;
  std::memset(start, 0, tun_header_bytes_);
  io_uring_prep_write(sqe, state_.tun_fd, start, info.length + tun_header_bytes_, 0);
  io_uring_sqe_set_data64(sqe, pack(Op::kTunWrite, 0, buffer));
}

void Datapath::queue_tun(uint32_t buffer) noexcept {
  const BufferInfo& info = pool_.info(buffer);
  if (!state_.tun_gso || state_.tun_fd < 0 || info.offset < tun_header_bytes_) {
    write_tun(buffer);
    return;
  }
  std::byte* packet = pool_.payload(buffer);
  if (open_tun_run_ >= 0) {
    TunRun& run = state_.tun_runs[static_cast<uint32_t>(open_tun_run_)];
    const uint32_t payload = info.length > run.header_bytes ? info.length - run.header_bytes : 0;
    if (!run.closed && run.count < kTunRunSegments && payload > 0 && payload <= run.segment_bytes &&
        run.payload_bytes + payload <= kTunRunPayloadBytes &&
        tun_run_header_bytes({packet, info.length}) == run.header_bytes &&
        tun_run_same_flow(pool_.payload(run.buffers[0]), packet, run.header_bytes)) {
      run.vectors[run.count] = {packet + run.header_bytes, payload};
      run.buffers[run.count] = buffer;
      ++run.count;
      run.payload_bytes += payload;
      run.closed = payload < run.segment_bytes;
      return;
    }
    flush_tun_run();
  }
  const uint32_t header_bytes = tun_run_header_bytes({packet, info.length});
  int32_t free_record = -1;
  for (uint32_t i = 0; header_bytes > 0 && i < state_.tun_runs.size(); ++i) {
    if (!state_.tun_runs[i].in_use) {
      free_record = static_cast<int32_t>(i);
      break;
    }
  }
  if (free_record < 0) {  // not a UDP packet that can start a run, or every run is in flight
    write_tun(buffer);
    return;
  }
  TunRun& run = state_.tun_runs[static_cast<uint32_t>(free_record)];
  run.in_use = true;
  run.header_bytes = header_bytes;
  run.segment_bytes = info.length - header_bytes;
  run.payload_bytes = run.segment_bytes;
  run.buffers[0] = buffer;
  run.count = 1;
  run.closed = false;
  open_tun_run_ = free_record;
}

void Datapath::flush_tun_run() noexcept {
  if (open_tun_run_ < 0) return;
  const auto record = static_cast<uint32_t>(open_tun_run_);
  TunRun& run = state_.tun_runs[record];
  open_tun_run_ = -1;
  if (run.count == 1) {  // a single packet is written as it always was
    run.in_use = false;
    write_tun(run.buffers[0]);
    return;
  }
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) {
    engine_.local_io().tun_tx_errors += run.count;
    for (uint32_t i = 0; i < run.count; ++i) pool_.release(run.buffers[i]);
    run.in_use = false;
    return;
  }
  std::byte* packet = pool_.payload(run.buffers[0]);
  std::memcpy(run.saved_header, packet, run.header_bytes);
  write_tun_run_header(packet - tun_header_bytes_, tun_header_bytes_, packet, run.header_bytes,
                       run.segment_bytes, run.payload_bytes);
  run.vectors[0] = {packet - tun_header_bytes_,
                    tun_header_bytes_ + run.header_bytes + run.segment_bytes};
  io_uring_prep_writev(sqe, state_.tun_fd, run.vectors, run.count, 0);
  io_uring_sqe_set_data64(sqe, pack(Op::kTunRunWrite, 0, record));
}

void Datapath::on_tun_run_write(uint32_t record, int32_t result) noexcept {
  if (record >= state_.tun_runs.size()) return;
  TunRun& run = state_.tun_runs[record];
  gw::LocalIo& io = engine_.local_io();
  const uint32_t expected = tun_header_bytes_ + run.header_bytes + run.payload_bytes;
  if (result >= 0 && static_cast<uint32_t>(result) == expected) {
    io.tun_tx_packets += run.count;
    ++io.tun_tx_batches;
    for (uint32_t i = 0; i < run.count; ++i) pool_.release(run.buffers[i]);
  } else if (result == -EINVAL || result == -EOPNOTSUPP) {
    // The device does not take a UDP_L4 write: off for good, and this run's packets are written
    // again one by one, the first with its own header back.
    state_.tun_gso = false;
    ++io.tun_gso_refused;
    std::memcpy(pool_.payload(run.buffers[0]), run.saved_header, run.header_bytes);
    for (uint32_t i = 0; i < run.count; ++i) write_tun(run.buffers[i]);
  } else {
    io.tun_tx_errors += run.count;
    for (uint32_t i = 0; i < run.count; ++i) pool_.release(run.buffers[i]);
  }
  run.in_use = false;
}

}  // namespace detwan::dataplane::uring
