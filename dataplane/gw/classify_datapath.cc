// IP parsing and the tunnel lookup: per packet, bounds-checked, no allocation, no exceptions.
// Classifier::create() (setup) lives here too: it is a few lines and keeps the rule layout in
// one file.
#include <algorithm>
#include <cstring>
#include <string>

#include "dataplane/gw/classify.h"

namespace detwan::dataplane::gw {
namespace {

constexpr std::size_t kIpv4MinHeaderBytes = 20;
constexpr std::size_t kIpv6HeaderBytes = 40;
constexpr std::size_t kUdpHeaderBytes = 8;
constexpr uint8_t kProtocolUdp = 17;
constexpr uint8_t kNextHeaderFragment = 44;

uint8_t byte_at(std::span<const std::byte> p, std::size_t i) noexcept {
  return std::to_integer<uint8_t>(p[i]);
}
uint16_t be16_at(std::span<const std::byte> p, std::size_t i) noexcept {
  return static_cast<uint16_t>((byte_at(p, i) << 8) | byte_at(p, i + 1));
}

bool parse_ipv4(std::span<const std::byte> p, IpInfo* out) noexcept {
  if (p.size() < kIpv4MinHeaderBytes) return false;
  const std::size_t header_bytes = std::size_t{byte_at(p, 0) & 0x0Fu} * 4;
  const std::size_t total_bytes = be16_at(p, 2);
  if (header_bytes < kIpv4MinHeaderBytes || header_bytes > total_bytes || total_bytes > p.size()) {
    return false;
  }
  out->ipv6 = false;
  std::memset(out->destination, 0, sizeof(out->destination));
  std::memset(out->source, 0, sizeof(out->source));
  for (std::size_t i = 0; i < 4; ++i) {
    out->source[i] = byte_at(p, 12 + i);
    out->destination[i] = byte_at(p, 16 + i);
  }
  out->protocol = byte_at(p, 9);
  const uint16_t fragment_field = be16_at(p, 6);
  out->fragment = (fragment_field & 0x3FFFu) != 0;  // MF (0x2000) or a fragment offset
  out->has_udp_port = out->protocol == kProtocolUdp && !out->fragment &&
                      total_bytes - header_bytes >= kUdpHeaderBytes;
  out->udp_destination_port = out->has_udp_port ? be16_at(p, header_bytes + 2) : 0;
  return true;
}

bool parse_ipv6(std::span<const std::byte> p, IpInfo* out) noexcept {
  if (p.size() < kIpv6HeaderBytes) return false;
  const std::size_t payload_bytes = be16_at(p, 4);
  if (kIpv6HeaderBytes + payload_bytes > p.size()) return false;
  out->ipv6 = true;
  for (std::size_t i = 0; i < 16; ++i) {
    out->source[i] = byte_at(p, 8 + i);
    out->destination[i] = byte_at(p, 24 + i);
  }
  out->protocol = byte_at(p, 6);
  out->fragment = out->protocol == kNextHeaderFragment;
  out->has_udp_port = out->protocol == kProtocolUdp && payload_bytes >= kUdpHeaderBytes;
  out->udp_destination_port = out->has_udp_port ? be16_at(p, kIpv6HeaderBytes + 2) : 0;
  return true;
}

uint64_t be64_of(const uint8_t* p) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// Is `address` (4 bytes for IPv4, 16 for IPv6; nothing further is read) inside one of
// `prefixes`? Whole words compared under the prefix's mask: no byte loop, no call.
bool any_contains(const std::vector<Prefix>& prefixes, bool ipv6, const uint8_t* address) noexcept {
  if (!ipv6) {
    const uint32_t a = (uint32_t{address[0]} << 24) | (uint32_t{address[1]} << 16) |
                       (uint32_t{address[2]} << 8) | address[3];
    for (const Prefix& p : prefixes) {
      if (p.ipv6 || p.length > 32) continue;
      const uint32_t mask = p.length == 0 ? 0 : ~uint32_t{0} << (32 - p.length);
      const uint32_t q = (uint32_t{p.address[0]} << 24) | (uint32_t{p.address[1]} << 16) |
                         (uint32_t{p.address[2]} << 8) | p.address[3];
      if (((a ^ q) & mask) == 0) return true;
    }
    return false;
  }
  const uint64_t high = be64_of(address);
  const uint64_t low = be64_of(address + 8);
  for (const Prefix& p : prefixes) {
    if (!p.ipv6 || p.length > 128) continue;
    const unsigned length = p.length;
    const uint64_t mask_high = length == 0 ? 0 : ~uint64_t{0} << (64 - std::min(length, 64u));
    const uint64_t mask_low = length <= 64 ? 0 : ~uint64_t{0} << (128 - length);
    if (((high ^ be64_of(p.address)) & mask_high) == 0 &&
        ((low ^ be64_of(p.address + 8)) & mask_low) == 0) {
      return true;
    }
  }
  return false;
}

// A prefix length above the family's maximum (the configuration refuses it; create() too).
std::unexpected<common::Error> bad_length(const TunnelConfig& tunnel, const Prefix& prefix,
                                          unsigned max_length) {
  return common::make_error(common::ErrorCode::kConfig, "tunnel " + std::to_string(tunnel.id) +
                                                            ": prefix length " +
                                                            std::to_string(prefix.length) +
                                                            " above " + std::to_string(max_length));
}

}  // namespace

InnerVerdict inner_verdict(const TunnelConfig& tunnel, wire::DataType type,
                           std::span<const std::byte> inner, bool foreign_source_allowed) noexcept {
  // Only a tenant-bound tunnel (match.src given) is checked; match.src needs match.dst.
  if (tunnel.src_prefixes.empty()) return InnerVerdict::kAllowed;
  if (type != wire::DataType::kIpv4 && type != wire::DataType::kIpv6) return InnerVerdict::kAllowed;
  // The addresses read in place (no copy), after the lengths parse_ip() checks.
  const auto* bytes = reinterpret_cast<const uint8_t*>(inner.data());
  const std::size_t size = inner.size();
  bool ipv6 = false;
  const uint8_t* source = nullptr;
  const uint8_t* destination = nullptr;
  if (size >= kIpv4MinHeaderBytes && (bytes[0] >> 4) == 4) {
    const std::size_t header_bytes = std::size_t{bytes[0] & 0x0Fu} * 4;
    const std::size_t total_bytes = be16_at(inner, 2);
    if (header_bytes < kIpv4MinHeaderBytes || header_bytes > total_bytes || total_bytes > size) {
      return InnerVerdict::kNotIp;
    }
    source = bytes + 12;
    destination = bytes + 16;
  } else if (size >= kIpv6HeaderBytes && (bytes[0] >> 4) == 6) {
    if (kIpv6HeaderBytes + be16_at(inner, 4) > size) return InnerVerdict::kNotIp;
    ipv6 = true;
    source = bytes + 8;
    destination = bytes + 24;
  } else {
    return InnerVerdict::kNotIp;
  }
  if (!any_contains(tunnel.src_prefixes, ipv6, destination)) {
    return InnerVerdict::kForeignDestination;
  }
  if (!foreign_source_allowed && !any_contains(tunnel.dst_prefixes, ipv6, source)) {
    return InnerVerdict::kForeignSource;
  }
  return InnerVerdict::kAllowed;
}

bool parse_ip(std::span<const std::byte> packet, IpInfo* out) noexcept {
  if (packet.empty()) return false;
  switch (byte_at(packet, 0) >> 4) {
    case 4:
      return parse_ipv4(packet, out);
    case 6:
      return parse_ipv6(packet, out);
    default:
      return false;
  }
}

common::Result<Classifier> Classifier::create(const std::vector<TunnelConfig>& tunnels,
                                              std::span<const uint32_t> indices) {
  if (!indices.empty() && indices.size() != tunnels.size()) {
    return common::make_error(common::ErrorCode::kInternal,
                              "classifier: one index per tunnel expected");
  }
  Classifier c;
  for (uint32_t t = 0; t < tunnels.size(); ++t) {
    const TunnelConfig& tunnel = tunnels[t];
    const auto first_range = static_cast<uint32_t>(c.ranges_.size());
    for (const PortRange& range : tunnel.udp_ports) {
      if (range.first > range.last) {
        return common::make_error(common::ErrorCode::kConfig,
                                  "tunnel " + std::to_string(tunnel.id) + ": udp port range " +
                                      std::to_string(range.first) + "-" +
                                      std::to_string(range.last) + " is empty");
      }
      c.ranges_.push_back(range);
    }
    const auto first_source = static_cast<uint32_t>(c.sources_.size());
    for (const Prefix& prefix : tunnel.src_prefixes) {
      const unsigned max_length = prefix.ipv6 ? 128 : 32;
      if (prefix.length > max_length) return bad_length(tunnel, prefix, max_length);
      uint8_t mask[16] = {};
      for (unsigned bit = 0; bit < prefix.length; ++bit) {
        mask[bit / 8] = static_cast<uint8_t>(mask[bit / 8] | (0x80u >> (bit % 8)));
      }
      c.sources_.push_back(Source{prefix.ipv6, key_of(prefix.address, mask), key_of(mask, mask)});
    }
    for (const Prefix& prefix : tunnel.dst_prefixes) {
      const unsigned max_length = prefix.ipv6 ? 128 : 32;
      if (prefix.length > max_length) return bad_length(tunnel, prefix, max_length);
      Rule rule;
      rule.ipv6 = prefix.ipv6;
      rule.length = prefix.length;
      for (unsigned bit = 0; bit < prefix.length; ++bit) {
        rule.mask[bit / 8] = static_cast<uint8_t>(rule.mask[bit / 8] | (0x80u >> (bit % 8)));
      }
      for (std::size_t i = 0; i < 16; ++i) {
        rule.address[i] = static_cast<uint8_t>(prefix.address[i] & rule.mask[i]);
      }
      rule.tunnel_index = indices.empty() ? t : indices[t];
      rule.first_range = first_range;
      rule.range_count = static_cast<uint32_t>(tunnel.udp_ports.size());
      rule.first_source = first_source;
      rule.source_count = static_cast<uint32_t>(tunnel.src_prefixes.size());
      c.rules_.push_back(rule);
    }
  }
  // Stable: rules with one prefix keep their configuration order.
  std::stable_sort(c.rules_.begin(), c.rules_.end(), [](const Rule& a, const Rule& b) {
    if (a.length != b.length) return a.length > b.length;
    if (a.ipv6 != b.ipv6) return !a.ipv6;
    return key_of(a.address, a.mask) < key_of(b.address, b.mask);
  });
  for (uint32_t i = 0; i < c.rules_.size(); ++i) {
    const Rule& rule = c.rules_[i];
    const Key key = key_of(rule.address, rule.mask);
    if (c.groups_.empty() || c.groups_.back().ipv6 != rule.ipv6 ||
        c.groups_.back().length != rule.length) {
      Group group;
      group.ipv6 = rule.ipv6;
      group.length = rule.length;
      std::memcpy(group.mask, rule.mask, sizeof(group.mask));
      group.first = static_cast<uint32_t>(c.runs_.size());
      c.groups_.push_back(group);
    }
    Group& group = c.groups_.back();
    if (group.count == 0 || c.runs_.back().key != key) {
      c.runs_.push_back(Run{key, i, 0});
      ++group.count;
    }
    ++c.runs_.back().count;
  }
  return c;
}

Classifier::Key Classifier::key_of(const uint8_t address[16], const uint8_t mask[16]) noexcept {
  Key key;
  for (std::size_t i = 0; i < 8; ++i) {
    key.high = (key.high << 8) | static_cast<uint64_t>(address[i] & mask[i]);
    key.low = (key.low << 8) | static_cast<uint64_t>(address[8 + i] & mask[8 + i]);
  }
  return key;
}

bool Classifier::port_matches(const Rule& rule, const IpInfo& ip) const noexcept {
  if (rule.range_count == 0) return true;
  if (!ip.has_udp_port) return false;
  for (uint32_t i = 0; i < rule.range_count; ++i) {
    const PortRange& r = ranges_[rule.first_range + i];
    if (ip.udp_destination_port >= r.first && ip.udp_destination_port <= r.last) return true;
  }
  return false;
}

bool Classifier::source_matches(const Rule& rule, const IpInfo& ip,
                                const Key& source) const noexcept {
  if (rule.source_count == 0) return true;
  for (uint32_t i = 0; i < rule.source_count; ++i) {
    const Source& s = sources_[rule.first_source + i];
    if (s.ipv6 == ip.ipv6 && (source.high & s.mask.high) == s.prefix.high &&
        (source.low & s.mask.low) == s.prefix.low) {
      return true;
    }
  }
  return false;
}

Route Classifier::classify(const IpInfo& ip) const noexcept {
  const Rule* fallback = nullptr;
  const Rule* foreign = nullptr;
  // The source as two words, once (only if some rule names sources).
  Key source;
  if (!sources_.empty()) {
    for (std::size_t i = 0; i < 8; ++i) {
      source.high = (source.high << 8) | static_cast<uint64_t>(ip.source[i]);
      source.low = (source.low << 8) | static_cast<uint64_t>(ip.source[8 + i]);
    }
  }
  for (const Group& group : groups_) {
    if (group.ipv6 != ip.ipv6) continue;
    const Key key = key_of(ip.destination, group.mask);
    const Run* first = runs_.data() + group.first;
    const Run* last = first + group.count;
    const Run* run =
        std::lower_bound(first, last, key, [](const Run& r, const Key& k) { return r.key < k; });
    if (run == last || run->key != key) continue;
    for (uint32_t i = run->first; i < run->first + run->count; ++i) {
      const Rule& rule = rules_[i];
      if (!source_matches(rule, ip, source)) {
        if (foreign == nullptr) foreign = &rule;
        continue;
      }
      if (port_matches(rule, ip)) return {RouteKind::kTunnel, rule.tunnel_index};
      if (fallback == nullptr) fallback = &rule;
    }
  }
  if (fallback != nullptr) return {RouteKind::kBestEffort, fallback->tunnel_index};
  if (foreign != nullptr) return {RouteKind::kForeignSource, foreign->tunnel_index};
  return {};
}

}  // namespace detwan::dataplane::gw
