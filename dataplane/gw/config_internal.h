#pragma once
// Private to the dataplane/gw/config*.cc files: the pieces the loader, the validator and the
// printer share. Everything here runs at setup time and reports problems by throwing
// common::Failure (ErrorCode::kConfig) with a "file:line:col: field 'path': message" text; the
// public entry points in config.cc turn that into a Result.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/config.h"
#include "dataplane/gw/config.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::gw::config_detail {

// Ranges of the numeric fields (docs/gateway.md, "Configuration reference", lists them).
inline constexpr int64_t kMaxNameBytes = 64;
inline constexpr uint32_t kMinPortMtu = 576;
inline constexpr uint32_t kMaxPortMtu = 9216;
inline constexpr uint32_t kIpv6MinMtu = 1280;
inline constexpr uint32_t kMaxSlotCount = 65536;
inline constexpr int64_t kMinCycleNs = 1'000;                    // 1us
inline constexpr int64_t kMaxCycleNs = 10'000'000'000;           // 10s
inline constexpr uint64_t kMinLineRateBps = 1'000;               // 1kbit
inline constexpr uint64_t kMaxLineRateBps = 10'000'000'000'000;  // 10tbit
inline constexpr int64_t kMaxIntervalNs = 3'600'000'000'000;     // 1h
inline constexpr int64_t kMaxClockOffsetNs = 3'600'000'000'000;  // |offset| <= 1h
inline constexpr int64_t kMaxPathDelayNs = 10'000'000'000;       // 10s
inline constexpr int64_t kMaxBoundNs = 10'000'000'000;           // 10s
inline constexpr int64_t kMaxHoldNs = 60'000'000'000;            // 60s
inline constexpr int64_t kMaxWaitNs = 1'000'000'000;             // 1s
inline constexpr uint32_t kMaxQueueFrames = 1u << 20;
inline constexpr uint32_t kMaxCapacityFrames = 1u << 24;
inline constexpr size_t kMaxUnixPathBytes = 107;  // sizeof(sockaddr_un::sun_path) - 1
inline constexpr size_t kIfNameMaxBytes = 15;     // IFNAMSIZ - 1

// Positions of every YAML node by field path ("tunnels[0].slots" -> line, column), recorded
// once from the parsed document, so checks that run on the loaded GatewayConfig can still
// point at the line that caused them.
class FieldLocator {
 public:
  explicit FieldLocator(std::string file) : file_(std::move(file)) {}
  // Records every node under `root` (the document).
  static FieldLocator from_document(const common::ConfigNode& root);
  // For a configuration built from a run-time request (no document): tunnels[i] is called
  // `where[i]` in the location ("add[0] (tunnel 1001): field 'slots'") and `text[i]` where a
  // message names it ("... tunnel 7 (tunnels[0]) ..." -> "... tunnel 7 (add[0]) ...").
  static FieldLocator for_request(std::vector<std::string> where, std::vector<std::string> text);

  // "file:line:col: field 'path'" with the position of `path`, or of its nearest recorded
  // ancestor when the field was not written (a default): the map that should have held it.
  [[nodiscard]] std::string where(std::string_view path) const;
  [[noreturn]] void fail(std::string_view path, std::string_view message) const;
  [[nodiscard]] bool has(std::string_view path) const { return positions_.count(path) != 0; }

 private:
  void record(const YAML::Node& node, const std::string& path, int key_line, int key_column);

  // Message text with every "tunnels[i]" replaced by request_text_[i] (request mode).
  [[nodiscard]] std::string rewrite(std::string_view message) const;

  std::string file_;
  std::map<std::string, std::pair<int, int>, std::less<>> positions_;
  bool request_ = false;
  std::vector<std::string> request_where_, request_text_;
};

// Field readers (config.cc). Each fails at the node with a message naming the rule.
int64_t duration_value(const common::ConfigNode& value, int64_t min_ns, int64_t max_ns,
                       bool allow_negative = false);
int64_t duration_field(const common::ConfigNode& map, std::string_view key, int64_t fallback,
                       int64_t min_ns, int64_t max_ns);
uint64_t rate_value(const common::ConfigNode& value, uint64_t min_bps, uint64_t max_bps);
Endpoint endpoint_value(const common::ConfigNode& value);
// The `metrics:` section (config_net.cc).
void parse_metrics_section(const common::ConfigNode& node, MetricsConfig* metrics);
Prefix prefix_value(const common::ConfigNode& value);
std::vector<Prefix> prefix_list(const common::ConfigNode& value);  // duplicates are errors
std::string name_value(const common::ConfigNode& value);           // valid_name()

// YAML -> GatewayConfig: types, units, ranges, unknown keys, per-field rules (config.cc,
// config_tunnels.cc). Cross-field rules are validate()'s.
GatewayConfig parse_document(const common::ConfigNode& root);
TunnelConfig parse_tunnel(const common::ConfigNode& node);

// Fills the secret of every key of an x25519 tunnel (auth.peer_public_key set) by ECDH with the
// gateway's identity (aead/key_exchange.h); other tunnels are left alone. On failure: the field
// at fault (under the tunnel, e.g. "auth.peer_public_key") and a message naming the tunnel.
struct KeyExchangeError {
  std::string field;
  std::string message;
};
std::optional<KeyExchangeError> derive_exchanged_keys(
    TunnelConfig& tunnel, const std::optional<GatewayIdentity>& identity);

// Cross-field rules (config_validate.cc, config_schedule.cc): names and references, addresses,
// MTUs, backend sections, slots and rates (via sched::GateControlList), playout, classifiers.
void validate(const GatewayConfig& config, const FieldLocator& at);
void validate_schedules(const GatewayConfig& config, const FieldLocator& at);
void validate_classifiers(const GatewayConfig& config, const FieldLocator& at);

// Names of ports, peers and the gateway: [A-Za-z0-9._-], 1..kMaxNameBytes.
bool valid_name(std::string_view name) noexcept;
// "aa:bb:cc:dd:ee:ff" (hex digits of either case). Fills *bytes when given.
bool parse_mac(std::string_view text, uint8_t* bytes) noexcept;
wire::IpVersion ip_version(const Endpoint& endpoint) noexcept;
bool is_unspecified(const Endpoint& endpoint) noexcept;
// True if one prefix contains the other (same IP version).
bool prefixes_overlap(const Prefix& a, const Prefix& b) noexcept;
std::string format_port_range(const PortRange& range);

// Printed names of the enums, as the YAML spells them.
std::string_view backend_name(Backend backend) noexcept;
std::string_view timing_name(TimingMode timing) noexcept;
std::string_view over_rate_name(sched::OverRateAction action) noexcept;
std::string_view late_name(sched::LateAction action) noexcept;

// A readable rate that is never lossy in print: "3.976gbit" or "~3.97612gbit".
std::string rate_text(uint64_t bps);
// "tunnels[3]", "peers[1]": the field paths errors name.
std::string tunnel_path(size_t i);
std::string peer_path(size_t i);

}  // namespace detwan::dataplane::gw::config_detail
