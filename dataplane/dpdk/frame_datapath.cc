// Outer-header parsing and building: per packet, no allocation, no exceptions, no logging.
#include <array>
#include <bit>
#include <cstring>

#include "dataplane/dpdk/frame.h"
#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/checksum.h"

namespace detwan::dataplane::dpdk {
namespace {

using wire::fold;
using wire::load_be16;
using wire::native_be16;
using wire::pseudo_header_sum;
using wire::store_be16;
using wire::store_be32;
using wire::sum_fixed;
using wire::sum_native;

constexpr uint16_t kIpv4DontFragment = 0x4000;
constexpr uint16_t kIpv4FragmentMask = 0x3FFF;  // MF flag + fragment offset
constexpr uint8_t kDefaultTtl = 64;

// True when the UDP checksum over pseudo header + datagram verifies.
bool udp_checksum_ok(bool ipv6, const std::byte* ip_source, const std::byte* ip_destination,
                     const std::byte* udp, uint32_t udp_bytes) noexcept {
  const uint64_t sum =
      pseudo_header_sum(ipv6, ip_source, ip_destination, udp_bytes) + sum_native(udp, udp_bytes);
  return fold(sum) == 0xFFFF;
}

void store_native16(std::byte* p, uint16_t v) noexcept { std::memcpy(p, &v, 2); }

bool same_address(const std::byte* p, const uint8_t* address, std::size_t n) noexcept {
  return std::memcmp(p, address, n) == 0;
}

FrameDrop check_udp(const std::byte* ip_source, const std::byte* ip_destination, bool ipv6,
                    const std::byte* udp, uint32_t l4_bytes, const WanAddress& address,
                    ChecksumState udp_checksum, ParsedFrame* out) noexcept {
  if (l4_bytes < kUdpHeaderBytes) return FrameDrop::kBadUdpLength;
  if (load_be16(udp + 4) != l4_bytes) return FrameDrop::kBadUdpLength;
  if (load_be16(udp + 2) != address.local.port) return FrameDrop::kWrongPort;
  const uint16_t checksum = load_be16(udp + 6);
  if (checksum == 0) {
    if (ipv6) return FrameDrop::kBadChecksum;  // mandatory over IPv6 (RFC 8200 §8.1)
  } else if (udp_checksum == ChecksumState::kBad ||
             (udp_checksum == ChecksumState::kUnknown &&
              !udp_checksum_ok(ipv6, ip_source, ip_destination, udp, l4_bytes))) {
    return FrameDrop::kBadChecksum;
  }
  out->udp_payload_offset = 0;  // set by the caller, which knows the IP header length
  out->udp_payload_bytes = l4_bytes - kUdpHeaderBytes;
  out->source = gw::Endpoint{};
  out->source.ipv6 = ipv6;
  std::memcpy(out->source.address, ip_source, ipv6 ? 16 : 4);
  out->source.port = load_be16(udp);
  return FrameDrop::kNone;
}

}  // namespace

FrameDrop parse_wan_frame(std::span<const std::byte> frame, const WanAddress& address,
                          ChecksumState ip_checksum, ChecksumState udp_checksum,
                          ParsedFrame* out) noexcept {
  if (frame.size() < kEtherHeaderBytes) return FrameDrop::kNotIp;
  const std::byte* p = frame.data();
  if (std::memcmp(p, address.mac.bytes, 6) != 0) return FrameDrop::kOtherMac;
  const uint16_t ether_type = load_be16(p + 12);
  const std::byte* ip = p + kEtherHeaderBytes;
  const std::size_t ip_room = frame.size() - kEtherHeaderBytes;

  if (ether_type == kEtherTypeIpv4) {
    if (address.local.ipv6) return FrameDrop::kWrongAddress;
    if (ip_room < kIpv4HeaderBytes) return FrameDrop::kBadIpHeader;
    const auto version_ihl = std::to_integer<uint8_t>(ip[0]);
    const uint32_t ihl_bytes = (version_ihl & 0x0Fu) * 4u;
    const uint16_t total_bytes = load_be16(ip + 2);
    if ((version_ihl >> 4) != 4 || ihl_bytes < kIpv4HeaderBytes || total_bytes < ihl_bytes ||
        total_bytes > ip_room) {
      return FrameDrop::kBadIpHeader;
    }
    if ((load_be16(ip + 6) & kIpv4FragmentMask) != 0) return FrameDrop::kFragment;
    if (std::to_integer<uint8_t>(ip[9]) != kIpProtoUdp) return FrameDrop::kNotUdp;
    if (!same_address(ip + 16, address.local.address, 4)) return FrameDrop::kWrongAddress;
    if (ip_checksum == ChecksumState::kBad ||
        (ip_checksum == ChecksumState::kUnknown &&
         fold(ihl_bytes == kIpv4HeaderBytes ? sum_fixed<kIpv4HeaderBytes>(ip)
                                            : sum_native(ip, ihl_bytes)) != 0xFFFF)) {
      return FrameDrop::kBadChecksum;
    }
    const FrameDrop drop = check_udp(ip + 12, ip + 16, false, ip + ihl_bytes,
                                     total_bytes - ihl_bytes, address, udp_checksum, out);
    if (drop == FrameDrop::kNone) {
      out->udp_payload_offset = kEtherHeaderBytes + ihl_bytes + kUdpHeaderBytes;
    }
    return drop;
  }
  if (ether_type == kEtherTypeIpv6) {
    if (!address.local.ipv6) return FrameDrop::kWrongAddress;
    if (ip_room < kIpv6HeaderBytes) return FrameDrop::kBadIpHeader;
    const uint16_t payload_bytes = load_be16(ip + 4);
    if ((std::to_integer<uint8_t>(ip[0]) >> 4) != 6 ||
        payload_bytes > ip_room - kIpv6HeaderBytes) {
      return FrameDrop::kBadIpHeader;
    }
    if (std::to_integer<uint8_t>(ip[6]) != kIpProtoUdp) return FrameDrop::kNotUdp;
    if (!same_address(ip + 24, address.local.address, 16)) return FrameDrop::kWrongAddress;
    const FrameDrop drop = check_udp(ip + 8, ip + 24, true, ip + kIpv6HeaderBytes,
                                     payload_bytes, address, udp_checksum, out);
    if (drop == FrameDrop::kNone) {
      out->udp_payload_offset = kEtherHeaderBytes + kIpv6HeaderBytes + kUdpHeaderBytes;
    }
    return drop;
  }
  return FrameDrop::kNotIp;
}

bool build_outer_headers(std::span<std::byte> frame, const OuterSpec& spec,
                         bool ip_checksum_offloaded, bool udp_checksum_offloaded) noexcept {
  if (spec.source == nullptr || spec.destination == nullptr ||
      spec.source->ipv6 != spec.destination->ipv6) {
    return false;
  }
  const bool ipv6 = spec.source->ipv6;
  const uint32_t headers = outer_header_bytes(ipv6);
  if (frame.size() < headers) return false;
  const std::size_t ip_header_bytes = ipv6 ? kIpv6HeaderBytes : kIpv4HeaderBytes;
  const std::size_t udp_bytes = frame.size() - kEtherHeaderBytes - ip_header_bytes;
  if (udp_bytes > 65535 - (ipv6 ? 0 : kIpv4HeaderBytes)) return false;

  std::byte* p = frame.data();
  std::memcpy(p, spec.destination_mac.bytes, 6);
  std::memcpy(p + 6, spec.source_mac.bytes, 6);
  store_be16(p + 12, ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
  std::byte* ip = p + kEtherHeaderBytes;
  std::byte* udp = ip + ip_header_bytes;
  const uint8_t traffic_class = static_cast<uint8_t>((spec.dscp & 0x3F) << 2);  // ECN 0
  // The addresses are summed from the spec, not from the frame just written.
  const auto* ip_source = reinterpret_cast<const std::byte*>(spec.source->address);
  const auto* ip_destination = reinterpret_cast<const std::byte*>(spec.destination->address);
  if (ipv6) {
    store_be32(ip, (6u << 28) | (static_cast<uint32_t>(traffic_class) << 20));  // flow label 0
    store_be16(ip + 4, static_cast<uint16_t>(udp_bytes));
    ip[6] = std::byte{kIpProtoUdp};
    ip[7] = std::byte{kDefaultTtl};
    std::memcpy(ip + 8, spec.source->address, 16);
    std::memcpy(ip + 24, spec.destination->address, 16);
  } else {
    ip[0] = std::byte{0x45};
    ip[1] = std::byte{traffic_class};
    store_be16(ip + 2, static_cast<uint16_t>(kIpv4HeaderBytes + udp_bytes));
    store_be16(ip + 4, 0);  // identification: atomic datagram (DF set), RFC 6864
    store_be16(ip + 6, kIpv4DontFragment);
    ip[8] = std::byte{kDefaultTtl};
    ip[9] = std::byte{kIpProtoUdp};
    store_be16(ip + 10, 0);
    std::memcpy(ip + 12, spec.source->address, 4);
    std::memcpy(ip + 16, spec.destination->address, 4);
    if (!ip_checksum_offloaded) {  // the header's words as written above, checksum 0
      const uint64_t sum =
          native_be16(static_cast<uint16_t>(0x4500u | traffic_class)) +
          native_be16(static_cast<uint16_t>(kIpv4HeaderBytes + udp_bytes)) +
          native_be16(kIpv4DontFragment) + native_be16((uint16_t{kDefaultTtl} << 8) | kIpProtoUdp) +
          sum_fixed<4>(ip_source) + sum_fixed<4>(ip_destination);
      store_native16(ip + 10, static_cast<uint16_t>(~fold(sum)));
    }
  }
  store_be16(udp, spec.source->port);
  store_be16(udp + 2, spec.destination->port);
  store_be16(udp + 4, static_cast<uint16_t>(udp_bytes));
  store_be16(udp + 6, 0);
  const uint64_t pseudo =
      pseudo_header_sum(ipv6, ip_source, ip_destination, static_cast<uint32_t>(udp_bytes));
  if (udp_checksum_offloaded) {
    store_native16(udp + 6, fold(pseudo));  // the NIC adds the datagram and complements
  } else {
    auto checksum = static_cast<uint16_t>(~fold(pseudo + sum_native(udp, udp_bytes)));
    if (checksum == 0) checksum = 0xFFFF;  // 0 means "no checksum" (RFC 768)
    store_native16(udp + 6, checksum);
  }
  return true;
}

}  // namespace detwan::dataplane::dpdk
