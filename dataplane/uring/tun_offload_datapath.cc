// TUN offload (tun_offload.h): parsing a read, cutting a UDP GSO run into packets, completing
// partial checksums, and the loop's handling of such a read. Per packet: no allocation, no
// exception, no logging; failures are counted in LocalIo.
#include <algorithm>
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

}  // namespace detwan::dataplane::uring
