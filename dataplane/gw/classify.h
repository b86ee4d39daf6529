#pragma once
// Classification of packets read from the TUN device: which tunnel carries them.
//
// parse_ip() reads the few fields classification needs from an IPv4/IPv6 packet; the bytes come
// from local hosts and are still treated as hostile: every length is checked before it is read,
// nothing asserts, any byte sequence is safe input.
//   * IPv4: version 4, IHL >= 5, IHL*4 <= total length <= the bytes given (trailing bytes are
//     allowed). The UDP destination port is read only for protocol 17 in an unfragmented packet
//     (MF clear and offset 0: every fragment of a datagram is classified alike, so fragments
//     never take different paths) whose UDP header is complete.
//   * IPv6: version 6, 40 + payload length <= the bytes given. The UDP port is read only when the
//     next header is UDP directly (no extension header, no fragment header) and complete.
//
// Classifier: the rules are the tunnels' dst_prefixes with their udp_ports and src_prefixes. A
// packet goes to the first rule, by decreasing prefix length then configuration order, whose
// prefix contains the destination, whose source prefixes contain the source (none: any source)
// and whose port ranges contain the UDP destination port (no ranges: any packet). If some rule
// matched destination and source but not the port (or it is not UDP), the packet travels as
// best effort on behalf of the tunnel with the longest such prefix. If rules matched the
// destination but none the source, the packet is foreign to them (kForeignSource: a host that
// is not the tunnel's tenant) and names the tunnel with the longest such prefix, whose
// foreign_source policy decides (dropped, or best effort). Otherwise there is no route.
// Lookup: the rules are grouped by (family, prefix length), longest first; in each group a
// binary search on the masked destination finds the rules of that exact prefix (configuration
// order kept), so a packet costs one search per distinct prefix length, not one comparison per
// rule (64 tunnels with a /32 each: one search of 6 steps instead of 64 scans); a rule's source
// prefixes cost two masked 64-bit compares each.
//
// The egress check (inner_verdict) of a tenant-bound tunnel (match.src given): a decapsulated
// packet is delivered only if its destination is inside the tunnel's src_prefixes (this side's
// tenant) and its source inside its dst_prefixes (the far side's tenant, whose hosts the far
// gateway admitted). A tunnel without match.src carries any source both ways, unchecked.
//
// Threading: Classifier is immutable after create(); classify() and inner_verdict() are const
// datapath functions (no allocation, no exceptions).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::gw {

struct IpInfo {
  bool ipv6 = false;
  uint8_t destination[16] = {};  // network order; IPv4 in the first 4 bytes
  uint8_t source[16] = {};       // network order; IPv4 in the first 4 bytes
  bool has_udp_port = false;     // a complete UDP header of an unfragmented packet
  uint16_t udp_destination_port = 0;
  uint8_t protocol = 0;   // IPv4 protocol / IPv6 next header
  bool fragment = false;  // IPv4 MF or offset != 0 (IPv6: fragment header next)

  [[nodiscard]] wire::DataType data_type() const noexcept {
    return ipv6 ? wire::DataType::kIpv6 : wire::DataType::kIpv4;
  }
};

// False if `packet` is not a well-formed IPv4/IPv6 packet as described above.
[[nodiscard]] bool parse_ip(std::span<const std::byte> packet, IpInfo* out) noexcept;

enum class RouteKind : uint8_t {
  kTunnel = 0,  // in the tunnel's slots
  kBestEffort,  // a tunnel's prefix, port not matched: best effort on behalf of the tunnel
  kNoRoute,
  // A tunnel's destination prefix, its source outside the tunnel's src_prefixes: the tunnel's
  // foreign_source policy decides (never its slots).
  kForeignSource,
};

// The egress check of one decapsulated packet of a tunnel (see above).
enum class InnerVerdict : uint8_t {
  kAllowed = 0,         // inside, or the tunnel is not tenant-bound (no match.src)
  kForeignSource,       // its source is outside the tunnel's dst_prefixes
  kForeignDestination,  // its destination is outside the tunnel's src_prefixes
  kNotIp,               // tenant-bound, and an IP-typed payload that is no IPv4/IPv6 packet
};
// `inner`: the decapsulated payload of a data packet of `type` (kDatagram, a service tunnel's:
// always kAllowed). `foreign_source_allowed`: the source check is skipped (a best-effort packet
// of a tunnel whose foreign_source policy is best effort); the destination is still checked.
[[nodiscard]] InnerVerdict inner_verdict(const TunnelConfig& tunnel, wire::DataType type,
                                         std::span<const std::byte> inner,
                                         bool foreign_source_allowed) noexcept;

struct Route {
  RouteKind kind = RouteKind::kNoRoute;
  uint32_t tunnel_index = UINT32_MAX;  // the tunnel's index given to create() (not kNoRoute)
};

class Classifier {
 public:
  // Setup: one rule per (tunnel, prefix). Errors (kConfig) name the tunnel: a prefix length
  // above 32/128, an empty port range (first > last). A route names tunnels[i] by indices[i]
  // (the engine's tunnel index), or by i when indices is empty.
  static common::Result<Classifier> create(const std::vector<TunnelConfig>& tunnels,
                                           std::span<const uint32_t> indices = {});

  [[nodiscard]] Route classify(const IpInfo& ip) const noexcept;
  [[nodiscard]] std::size_t rule_count() const noexcept { return rules_.size(); }

 private:
  struct Rule {
    bool ipv6 = false;
    uint8_t length = 0;
    uint8_t address[16] = {};  // masked to the prefix length
    uint8_t mask[16] = {};
    uint32_t tunnel_index = 0;
    uint32_t first_range = 0;   // into ranges_
    uint32_t range_count = 0;   // 0: any packet
    uint32_t first_source = 0;  // into sources_
    uint32_t source_count = 0;  // 0: any source
  };
  // The masked destination as two words (IPv4: the address in `high`).
  struct Key {
    uint64_t high = 0, low = 0;
    friend auto operator<=>(const Key&, const Key&) = default;
  };
  // One source prefix of a rule: the masked prefix and its mask, as two words each.
  struct Source {
    bool ipv6 = false;
    Key prefix;
    Key mask;
  };
  // Rules with one exact prefix: rules_[first, first + count), configuration order.
  struct Run {
    Key key;
    uint32_t first = 0, count = 0;
  };
  // Rules of one family and prefix length: runs_[first, first + count), sorted by key.
  struct Group {
    bool ipv6 = false;
    uint8_t length = 0;
    uint8_t mask[16] = {};
    uint32_t first = 0, count = 0;
  };
  [[nodiscard]] static Key key_of(const uint8_t address[16], const uint8_t mask[16]) noexcept;
  [[nodiscard]] bool port_matches(const Rule& rule, const IpInfo& ip) const noexcept;
  [[nodiscard]] bool source_matches(const Rule& rule, const IpInfo& ip,
                                    const Key& source) const noexcept;

  // By decreasing prefix length, then family, then prefix, then configuration order.
  std::vector<Rule> rules_;
  std::vector<Run> runs_;
  std::vector<Group> groups_;  // by decreasing prefix length
  std::vector<PortRange> ranges_;
  std::vector<Source> sources_;
};

}  // namespace detwan::dataplane::gw
