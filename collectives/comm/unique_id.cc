// UniqueId: the spec of a rendezvous, and its 128-byte form for the C API. Links against the
// bootstrap only (coll_bootstrap_lib), never the rest of the communicator.
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_io.h"
#include "collectives/comm/communicator.h"

namespace detwan::collectives {
namespace {

// Byte layout: "DWID" | u8 version | u8 spec length | spec | NUL padding to 128 bytes.
constexpr std::string_view kMagic = "DWID";
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 6;
constexpr size_t kMaxSpecChars = kUniqueIdBytes - kHeaderBytes;

std::unexpected<Error> bad_id(std::string_view why) {
  return make_error(ErrorCode::kInvalidArgument, fmt::format("bad unique id ({})", why));
}

// The first up, non-loopback IPv4 address: what other hosts most likely reach us at.
std::string first_external_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* it = list; it != nullptr && found.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_UP) == 0 || (it->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* addr = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
    if (::inet_ntop(AF_INET, &addr->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace

namespace {

Result<UniqueId> create_root_id(const std::string& listen_host, int64_t root_timeout_ns,
                                const std::string& secret) {
  std::string host = listen_host;
  if (host.empty()) {
    const char* env = std::getenv("DETWAN_LISTEN_HOST");
    if (env != nullptr) host = env;
  }
  if (host.empty()) host = first_external_ipv4();
  if (host.empty()) host = "127.0.0.1";
  // "tcp://" + host + ":65535#" + the secret's digits must fit, checked before a root starts.
  const size_t secret_chars = secret.empty() ? bootstrap::kMinSecretChars : secret.size();
  if (host.size() + 6 + 2 + 6 + 1 + secret_chars > kMaxSpecChars) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("listen host '{}' is too long for the {}-byte unique id", host,
                                  kUniqueIdBytes));
  }
  auto spec = secret.empty() ? start_bootstrap_root(host, root_timeout_ns)
                             : start_bootstrap_root(host, root_timeout_ns, secret);
  if (!spec) return std::unexpected(spec.error());
  return UniqueId::from_string(*spec);
}

}  // namespace

Result<UniqueId> UniqueId::create_root(const std::string& listen_host, int64_t root_timeout_ns) {
  return create_root_id(listen_host, root_timeout_ns, "");
}

Result<UniqueId> UniqueId::create_root_with_secret(const std::string& secret,
                                                   const std::string& listen_host,
                                                   int64_t root_timeout_ns) {
  if (secret.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "create_root_with_secret: empty secret (32-64 hex digits)");
  }
  return create_root_id(listen_host, root_timeout_ns, secret);
}

UniqueId UniqueId::without_secret() const {
  UniqueId id;
  id.spec_ = spec_.substr(0, spec_.find('#'));
  return id;
}

Result<UniqueId> UniqueId::from_string(const std::string& spec) {
  auto parsed = bootstrap::parse_spec(spec);
  if (!parsed) return std::unexpected(parsed.error());
  std::string normal = parsed->to_string();
  if (normal.size() > kMaxSpecChars) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap spec '{}' is longer than the {} characters a "
                                  "unique id holds",
                                  spec, kMaxSpecChars));
  }
  UniqueId id;
  id.spec_ = std::move(normal);
  return id;
}

Result<UniqueId> UniqueId::from_bytes(const std::array<char, kUniqueIdBytes>& bytes) {
  if (std::string_view(bytes.data(), kMagic.size()) != kMagic) return bad_id("no magic");
  const auto version = static_cast<uint8_t>(bytes[4]);
  if (version != kVersion) {
    return bad_id(fmt::format("version {}, this library reads version {}", version, kVersion));
  }
  const auto length = static_cast<uint8_t>(bytes[5]);
  if (length == 0 || length > kMaxSpecChars) {
    return bad_id(fmt::format("spec length {}", length));
  }
  const auto* spec_begin = bytes.data() + kHeaderBytes;
  if (std::any_of(spec_begin + length, bytes.data() + kUniqueIdBytes,
                  [](char c) { return c != '\0'; })) {
    return bad_id("garbage after the spec");
  }
  auto id = from_string(std::string(spec_begin, length));
  if (!id) return bad_id(id.error().message);
  return id;
}

std::array<char, kUniqueIdBytes> UniqueId::to_bytes() const {
  std::array<char, kUniqueIdBytes> bytes{};
  std::memcpy(bytes.data(), kMagic.data(), kMagic.size());
  bytes[4] = static_cast<char>(kVersion);
  // Every constructor bounds spec_ to kMaxSpecChars, so it always fits.
  const size_t length = std::min(spec_.size(), kMaxSpecChars);
  bytes[5] = static_cast<char>(length);
  std::memcpy(bytes.data() + kHeaderBytes, spec_.data(), length);
  return bytes;
}

std::string UniqueId::to_string() const { return spec_; }

}  // namespace detwan::collectives
