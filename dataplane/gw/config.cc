// Loading the gateway configuration: YAML document -> GatewayConfig (field types, units, ranges,
// unknown keys), then the cross-field rules of config_validate.cc / config_schedule.cc.
#include "dataplane/gw/config.h"

#include <algorithm>
#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <openssl/crypto.h>

#include "common/secret_file.h"
#include "common/units.h"
#include "common/x25519.h"
#include "dataplane/gw/config_internal.h"

namespace detwan::dataplane::gw {
namespace config_detail {
namespace {

using common::ConfigNode;

int one_based(int zero_based) { return zero_based >= 0 ? zero_based + 1 : 0; }

YAML::Mark mark_of(const YAML::Node& node) {
  try {
    return node.Mark();
  } catch (const YAML::Exception&) {
    return YAML::Mark::null_mark();
  }
}

template <typename Enum>
Enum choice(const ConfigNode& map, std::string_view key, Enum fallback,
            std::initializer_list<std::pair<std::string_view, Enum>> names) {
  const auto value = map.maybe_child(key);
  if (!value) return fallback;
  const std::string text = value->as_string();
  std::string allowed;
  for (const auto& [name, item] : names) {
    if (name == text) return item;
    allowed += allowed.empty() ? "" : ", ";
    allowed += name;
  }
  value->fail(fmt::format("'{}' is not one of: {}", text, allowed));
}

uint32_t u32_field(const ConfigNode& map, std::string_view key, uint32_t fallback,
                   int64_t min_value, int64_t max_value) {
  return static_cast<uint32_t>(map.get_int(key, fallback, min_value, max_value));
}

void parse_gateway_section(const ConfigNode& node, GatewayConfig* config) {
  node.check_keys({"name", "backend", "timing", "cpu", "control_socket", "admin_socket",
                   "admin_mode", "admin_uids", "buffers", "batch", "wan_gso", "wan_gro", "shards",
                   "shard_cpus", "release_ahead", "playout_ahead", "rx_coalesce"});
  config->name = name_value(node.child("name"));
  config->backend = choice(node, "backend", Backend::kUring,
                           {{"uring", Backend::kUring}, {"dpdk", Backend::kDpdk}});
  config->timing = choice(node, "timing", TimingMode::kLowCpu,
                          {{"low-cpu", TimingMode::kLowCpu}, {"busy", TimingMode::kBusy}});
  config->cpu = static_cast<int>(node.get_int("cpu", -1, -1, 1023));
  if (const auto socket = node.maybe_child("control_socket")) {
    config->control_socket = socket->as_string();
    const std::string& text = config->control_socket;
    if (text == "@") socket->fail("an abstract socket needs a name after '@' (e.g. '@detwan-gw')");
    if (text.size() > kMaxUnixPathBytes) {
      socket->fail(fmt::format("{} bytes: a unix socket path holds at most {}", text.size(),
                               kMaxUnixPathBytes));
    }
    if (text.find('\0') != std::string::npos) socket->fail("contains a NUL byte");
  }
  if (const auto admin = node.maybe_child("admin_socket")) {
    config->admin_socket = admin->as_string();
    if (!config->admin_socket.empty()) {  // "" = none
      if (auto ok = check_admin_socket(config->admin_socket); !ok) {
        admin->fail(ok.error().message);
      }
    }
  }
  if (const auto mode = node.maybe_child("admin_mode")) {
    // Octal digits with a leading 0, as chmod takes them; YAML would read 0600 as a number.
    const std::string text = mode->as_string();
    bool octal = text.size() >= 2 && text.size() <= 4 && text.front() == '0';
    uint32_t bits = 0;
    for (const char c : text) {
      octal = octal && c >= '0' && c <= '7';
      bits = bits * 8 + static_cast<uint32_t>(c - '0');
    }
    if (!octal) {
      mode->fail(
          fmt::format("'{}' is not an octal mode like 0600 (a leading 0, then up to three "
                      "digits 0-7)",
                      text));
    }
    config->admin_mode = bits;
  }
  if (const auto uids = node.maybe_child("admin_uids")) {
    for (const ConfigNode& item : uids->items()) {
      const auto uid = static_cast<uint32_t>(item.as_int(0, UINT32_MAX - 1));
      for (const uint32_t seen : config->admin_uids) {
        if (seen == uid) item.fail(fmt::format("uid {} is listed twice", uid));
      }
      config->admin_uids.push_back(uid);
    }
  }
  config->buffer_count = u32_field(node, "buffers", 8192, 64, 1 << 20);
  config->batch = u32_field(node, "batch", 32, 1, 1024);
  config->wan_gso = node.get_bool("wan_gso", true);
  config->wan_gro = node.get_bool("wan_gro", true);
  config->shards = u32_field(node, "shards", 1, 1, kMaxUringShards);
  config->release_ahead_ns = duration_field(node, "release_ahead", 500'000, 0, kMaxWakeBatchNs);
  config->playout_ahead_ns = duration_field(node, "playout_ahead", 50'000, 0, kMaxWakeBatchNs);
  config->rx_coalesce_ns = duration_field(node, "rx_coalesce", 500'000, 0, kMaxWakeBatchNs);
  if (const auto cpus = node.maybe_child("shard_cpus")) {
    if (!cpus->is_sequence()) cpus->fail("a list of CPU numbers like [2, 3], one per shard");
    for (const ConfigNode& item : cpus->items()) {
      const auto cpu = static_cast<uint32_t>(item.as_int(0, 1023));
      config->shard_cpus.push_back(cpu);
    }
  }
}

bool valid_interface_name(std::string_view name) {
  if (name.empty() || name.size() > kIfNameMaxBytes || name == "." || name == "..") return false;
  for (const char c : name) {
    if (c <= ' ' || c > '~' || c == '/' || c == ':') return false;
  }
  return true;
}

void parse_tun_section(const ConfigNode& node, TunConfig* tun) {
  node.check_keys({"enabled", "name", "mtu", "routes", "offload", "queue"});
  tun->enabled = node.get_bool("enabled", true);
  tun->offload = node.get_bool("offload", true);
  if (const auto name = node.maybe_child("name")) {
    tun->name = name->as_string();
    if (!valid_interface_name(tun->name)) {
      name->fail(
          fmt::format("'{}' is not a valid interface name (1..{} printable characters, "
                      "no '/', ':' or spaces)",
                      tun->name, kIfNameMaxBytes));
    }
  }
  tun->mtu_bytes = u32_field(node, "mtu", 1400, kMinPortMtu, kMaxPortMtu);
  tun->queue_packets = u32_field(node, "queue", 4096, 16, 1'000'000);
  if (const auto routes = node.maybe_child("routes")) tun->routes = prefix_list(*routes);
}

void parse_dpdk_section(const ConfigNode& node, DpdkConfig* dpdk) {
  node.check_keys({"eal", "mbufs", "lcore", "lcores"});
  if (const auto eal = node.maybe_child("eal")) {
    for (const ConfigNode& item : eal->items()) {
      std::string arg = item.as_string();
      if (arg.empty()) item.fail("empty EAL argument");
      dpdk->eal_args.push_back(std::move(arg));
    }
  }
  dpdk->mbuf_count = u32_field(node, "mbufs", 8191, 512, (1 << 24) - 1);
  dpdk->lcore = static_cast<int>(node.get_int("lcore", -1, -1, 1023));
  if (const auto lcores = node.maybe_child("lcores")) {
    if (!lcores->is_sequence()) lcores->fail("a list of lcore ids like [1, 2]");
    for (const ConfigNode& item : lcores->items()) {
      const auto lcore = static_cast<uint32_t>(item.as_int(0, 1023));
      if (std::find(dpdk->lcores.begin(), dpdk->lcores.end(), lcore) != dpdk->lcores.end()) {
        item.fail(fmt::format("lcore {} is listed twice", lcore));
      }
      dpdk->lcores.push_back(lcore);
    }
    if (dpdk->lcores.empty()) lcores->fail("an empty list: leave it out for one lcore");
    if (dpdk->lcore >= 0) {
      lcores->fail(fmt::format("give either 'lcore' ({}) or 'lcores', not both", dpdk->lcore));
    }
  }
}

std::string mac_field(const ConfigNode& node, bool required) {
  const std::string text = node.as_string();
  if (text.empty() && !required) return text;
  uint8_t bytes[6] = {};
  if (!parse_mac(text, bytes)) {
    node.fail(fmt::format("'{}' is not a MAC address (expected aa:bb:cc:dd:ee:ff)", text));
  }
  if ((bytes[0] & 1) != 0) node.fail(fmt::format("'{}' is a multicast MAC address", text));
  if (bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0 && bytes[3] == 0 && bytes[4] == 0 &&
      bytes[5] == 0) {
    node.fail(fmt::format("'{}' is the all-zero MAC address", text));
  }
  return text;
}

DpdkPortConfig parse_port_dpdk(const ConfigNode& node) {
  node.check_keys({"device", "local_mac", "next_hop_mac", "rx_queue", "tx_queue"});
  DpdkPortConfig dpdk;
  const ConfigNode device = node.child("device");
  dpdk.device = device.as_string();
  if (dpdk.device.empty()) device.fail("empty device (a PCI address or a vdev name)");
  if (const auto local_mac = node.maybe_child("local_mac")) {
    dpdk.local_mac = mac_field(*local_mac, false);
  }
  dpdk.next_hop_mac = mac_field(node.child("next_hop_mac"), true);
  dpdk.rx_queue_size = static_cast<uint16_t>(node.get_int("rx_queue", 1024, 32, 32768));
  dpdk.tx_queue_size = static_cast<uint16_t>(node.get_int("tx_queue", 1024, 32, 32768));
  return dpdk;
}

WanPortConfig parse_wan_port(const ConfigNode& node) {
  node.check_keys({"name", "local", "line_rate", "mtu", "cycle", "slots", "guard", "base_time",
                   "best_effort_dscp", "capacity", "dpdk"});
  WanPortConfig port;
  port.name = name_value(node.child("name"));
  port.local = endpoint_value(node.child("local"));
  port.line_rate_bps = rate_value(node.child("line_rate"), kMinLineRateBps, kMaxLineRateBps);
  port.mtu_bytes = u32_field(node, "mtu", 1500, kMinPortMtu, kMaxPortMtu);
  port.cycle_ns = duration_field(node, "cycle", 1'000'000, kMinCycleNs, kMaxCycleNs);
  port.slot_count = u32_field(node, "slots", 100, 1, kMaxSlotCount);
  port.guard_ns = duration_field(node, "guard", 0, 0, kMaxCycleNs);
  port.base_time_ns = duration_field(node, "base_time", 0, 0, INT64_MAX);
  port.best_effort_dscp = static_cast<uint8_t>(node.get_int("best_effort_dscp", 0, 0, 63));
  port.capacity_frames = u32_field(node, "capacity", 65536, 1, kMaxCapacityFrames);
  if (const auto dpdk = node.maybe_child("dpdk")) port.dpdk = parse_port_dpdk(*dpdk);
  return port;
}

PeerConfig parse_peer(const ConfigNode& node) {
  node.check_keys({"name", "wan_port", "endpoint", "clock_offset", "time_exchange_interval",
                   "keepalive_interval", "dead_after", "min_path_delay"});
  PeerConfig peer;
  peer.name = name_value(node.child("name"));
  peer.wan_port = name_value(node.child("wan_port"));
  const ConfigNode endpoint = node.child("endpoint");
  peer.endpoint = endpoint_value(endpoint);
  if (peer.endpoint.port == 0) endpoint.fail("the peer's UDP port must not be 0");
  if (is_unspecified(peer.endpoint)) {
    endpoint.fail(fmt::format("'{}': the peer's address must not be the unspecified address",
                              format_endpoint(peer.endpoint)));
  }
  if (const auto offset = node.maybe_child("clock_offset")) {
    if (!(offset->is_scalar() && offset->as_string() == "auto")) {
      peer.clock_offset_ns = duration_value(*offset, -kMaxClockOffsetNs, kMaxClockOffsetNs, true);
    }
  }
  peer.time_exchange_interval_ns =
      duration_field(node, "time_exchange_interval", 1'000'000'000, 1'000'000, kMaxIntervalNs);
  peer.keepalive_interval_ns =
      duration_field(node, "keepalive_interval", 100'000'000, 1'000'000, kMaxIntervalNs);
  peer.dead_after_ns = duration_field(node, "dead_after", 1'000'000'000, 1'000'000, kMaxIntervalNs);
  peer.min_path_delay_ns = duration_field(node, "min_path_delay", 0, 0, kMaxPathDelayNs);
  return peer;
}

}  // namespace

// ---- FieldLocator ----

FieldLocator FieldLocator::from_document(const ConfigNode& root) {
  FieldLocator locator(root.file());
  locator.record(root.raw(), "", 0, 0);
  return locator;
}

void FieldLocator::record(const YAML::Node& node, const std::string& path, int key_line,
                          int key_column) {
  const YAML::Mark mark = mark_of(node);
  const bool own_position = mark.line >= 0 && !(node.IsNull() && key_line > 0);
  positions_[path] = own_position ? std::pair{one_based(mark.line), one_based(mark.column)}
                                  : std::pair{key_line, key_column};
  const auto [line, column] = positions_[path];
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) continue;
      const YAML::Mark key_mark = mark_of(it->first);
      const std::string child =
          path.empty() ? it->first.Scalar() : fmt::format("{}.{}", path, it->first.Scalar());
      record(it->second, child, one_based(key_mark.line), one_based(key_mark.column));
    }
  } else if (node.IsSequence()) {
    size_t index = 0;
    for (auto it = node.begin(); it != node.end(); ++it, ++index) {
      record(*it, fmt::format("{}[{}]", path, index), line, column);
    }
  }
}

FieldLocator FieldLocator::for_request(std::vector<std::string> where,
                                       std::vector<std::string> text) {
  FieldLocator locator("<request>");
  locator.request_ = true;
  locator.request_where_ = std::move(where);
  locator.request_text_ = std::move(text);
  return locator;
}

namespace {

// "tunnels[12]..." at `at`: the index and the length of "tunnels[12]"; false if not there.
bool tunnel_path_at(std::string_view text, size_t at, size_t* index, size_t* length) {
  constexpr std::string_view kHead = "tunnels[";
  if (text.substr(at, kHead.size()) != kHead) return false;
  size_t i = at + kHead.size();
  size_t value = 0;
  const size_t digits_start = i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - digits_start < 9) {
    value = value * 10 + static_cast<size_t>(text[i] - '0');
    ++i;
  }
  if (i == digits_start || i >= text.size() || text[i] != ']') return false;
  *index = value;
  *length = i + 1 - at;
  return true;
}

}  // namespace

std::string FieldLocator::rewrite(std::string_view message) const {
  std::string out;
  for (size_t i = 0; i < message.size();) {
    size_t index = 0, length = 0;
    if (tunnel_path_at(message, i, &index, &length) && index < request_text_.size()) {
      out += request_text_[index];
      i += length;
    } else {
      out += message[i++];
    }
  }
  return out;
}

std::string FieldLocator::where(std::string_view path) const {
  if (request_) {
    size_t index = 0, length = 0;
    if (tunnel_path_at(path, 0, &index, &length) && index < request_where_.size()) {
      std::string_view rest = path.substr(length);
      if (!rest.empty() && rest.front() == '.') rest.remove_prefix(1);
      return rest.empty() ? request_where_[index]
                          : fmt::format("{}: field '{}'", request_where_[index], rest);
    }
    return fmt::format("field '{}'", rewrite(path));
  }
  std::string_view probe = path;
  while (true) {
    const auto found = positions_.find(probe);
    if (found != positions_.end() && found->second.first > 0) {
      return fmt::format("{}:{}:{}: field '{}'", file_, found->second.first, found->second.second,
                         path);
    }
    if (probe.empty()) break;
    const size_t cut = probe.back() == ']' ? probe.rfind('[') : probe.rfind('.');
    probe = probe.substr(0, cut == std::string_view::npos ? 0 : cut);
  }
  return fmt::format("{}: field '{}'", file_, path);
}

void FieldLocator::fail(std::string_view path, std::string_view message) const {
  throw common::Failure(common::Error{
      common::ErrorCode::kConfig,
      fmt::format("{}: {}", where(path), request_ ? rewrite(message) : std::string(message))});
}

// ---- field readers ----

int64_t duration_value(const ConfigNode& value, int64_t min_ns, int64_t max_ns,
                       bool allow_negative) {
  const int64_t ns = value.as_duration_ns(allow_negative);
  if (ns < min_ns || ns > max_ns) {
    value.fail(fmt::format("{} is out of range [{}, {}]", value.as_string(),
                           common::format_duration_ns(min_ns), common::format_duration_ns(max_ns)));
  }
  return ns;
}

int64_t duration_field(const ConfigNode& map, std::string_view key, int64_t fallback,
                       int64_t min_ns, int64_t max_ns) {
  const auto value = map.maybe_child(key);
  return value ? duration_value(*value, min_ns, max_ns) : fallback;
}

uint64_t rate_value(const ConfigNode& value, uint64_t min_bps, uint64_t max_bps) {
  const uint64_t bps = value.as_rate_bps();
  if (bps < min_bps || bps > max_bps) {
    value.fail(fmt::format("{} is out of range [{}, {}]", value.as_string(),
                           common::format_rate_bps(min_bps), common::format_rate_bps(max_bps)));
  }
  return bps;
}

Endpoint endpoint_value(const ConfigNode& value) {
  if (!value.is_scalar()) {
    value.fail(
        "expected an endpoint like \"10.101.12.1:4789\" or \"[fd00::1]:4789\" (quote "
        "IPv6 endpoints: YAML reads [..] as a list)");
  }
  auto endpoint = parse_endpoint(value.as_string());
  if (!endpoint) value.fail(endpoint.error().message);
  return *endpoint;
}

Prefix prefix_value(const ConfigNode& value) {
  auto prefix = parse_prefix(value.as_string());
  if (!prefix) value.fail(prefix.error().message);
  return *prefix;
}

std::vector<Prefix> prefix_list(const ConfigNode& value) {
  std::vector<Prefix> prefixes;
  for (const ConfigNode& item : value.items()) {
    Prefix prefix = prefix_value(item);
    for (const Prefix& seen : prefixes) {
      if (seen == prefix) item.fail(fmt::format("{} is listed twice", format_prefix(prefix)));
    }
    prefixes.push_back(prefix);
  }
  return prefixes;
}

std::string name_value(const ConfigNode& value) {
  std::string name = value.as_string();
  if (!valid_name(name)) {
    value.fail(
        fmt::format("'{}' is not a valid name (1..{} of A-Z a-z 0-9 . _ -)", name, kMaxNameBytes));
  }
  return name;
}

// identity: {private_key_file: PATH}: a PEM X25519 private key in a secret file.
GatewayIdentity parse_identity(const ConfigNode& node) {
  if (!node.is_map()) node.fail("expected a map: {private_key_file: PATH}");
  node.check_keys({"private_key_file"});
  const ConfigNode file = node.child("private_key_file");
  GatewayIdentity identity;
  identity.private_key_file = file.as_string();
  auto text = common::read_secret_file(identity.private_key_file, "identity key file", 16384);
  if (!text) file.fail(text.error().message);
  auto keys = common::crypto::x25519_from_private_pem(*text);
  OPENSSL_cleanse(text->data(), text->size());
  if (!keys) {
    file.fail(
        fmt::format("identity key file '{}': {}", identity.private_key_file, keys.error().message));
  }
  identity.keys = *keys;
  return identity;
}

GatewayConfig parse_document(const ConfigNode& root) {
  if (!root.is_map()) root.fail("expected a map with the sections gateway, wan_ports, ...");
  root.check_keys(
      {"gateway", "identity", "tun", "dpdk", "wan_ports", "peers", "tunnels", "metrics"});
  GatewayConfig config;
  config.source = root.file();
  parse_gateway_section(root.child("gateway"), &config);
  if (const auto identity = root.maybe_child("identity"))
    config.identity = parse_identity(*identity);
  if (const auto tun = root.maybe_child("tun")) parse_tun_section(*tun, &config.tun);
  if (const auto dpdk = root.maybe_child("dpdk")) parse_dpdk_section(*dpdk, &config.dpdk);
  if (const auto metrics = root.maybe_child("metrics")) {
    parse_metrics_section(*metrics, &config.metrics);
  }
  const ConfigNode ports = root.child("wan_ports");
  for (const ConfigNode& item : ports.items()) config.wan_ports.push_back(parse_wan_port(item));
  if (config.wan_ports.empty()) ports.fail("at least one WAN port is required");
  if (const auto peers = root.maybe_child("peers")) {
    for (const ConfigNode& item : peers->items()) config.peers.push_back(parse_peer(item));
  }
  if (const auto tunnels = root.maybe_child("tunnels")) {
    for (const ConfigNode& item : tunnels->items()) config.tunnels.push_back(parse_tunnel(item));
  }
  return config;
}

}  // namespace config_detail

namespace {

common::Result<GatewayConfig> load(const std::function<common::ConfigNode()>& read) {
  try {
    const common::ConfigNode root = read();
    const auto locator = config_detail::FieldLocator::from_document(root);
    GatewayConfig config = config_detail::parse_document(root);
    for (size_t i = 0; i < config.tunnels.size(); ++i) {
      const auto failed = config_detail::derive_exchanged_keys(config.tunnels[i], config.identity);
      if (failed)
        locator.fail(config_detail::tunnel_path(i) + "." + failed->field, failed->message);
    }
    config_detail::validate(config, locator);
    return config;
  } catch (const common::Failure& failure) {
    return std::unexpected(failure.error());
  } catch (const YAML::Exception& e) {
    return common::make_error(common::ErrorCode::kConfig, fmt::format("YAML error: {}", e.what()));
  }
}

}  // namespace

common::Result<void> check_admin_socket(std::string_view path) {
  const auto refuse = [&](std::string_view why) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("admin socket '{}': {}", path, why));
  };
  if (!path.empty() && path.front() == '@') {
    return refuse(
        "must be a filesystem path starting with '/': an abstract socket has no file "
        "permissions, so anyone in the network namespace could change the gateway");
  }
  if (path.empty() || path.front() != '/')
    return refuse("must be an absolute path starting with '/'");
  if (path.size() > config_detail::kMaxUnixPathBytes) {
    return refuse(fmt::format("{} bytes: a unix socket path holds at most {}", path.size(),
                              config_detail::kMaxUnixPathBytes));
  }
  if (path.find('\0') != std::string_view::npos) return refuse("contains a NUL byte");
  return {};
}

common::Result<GatewayConfig> load_gateway_config(const std::string& path) {
  return load([&] { return common::ConfigNode::load_file(path); });
}

common::Result<GatewayConfig> load_gateway_config_string(const std::string& yaml,
                                                         const std::string& source) {
  return load([&] { return common::ConfigNode::load_string(yaml, source); });
}

}  // namespace detwan::dataplane::gw
