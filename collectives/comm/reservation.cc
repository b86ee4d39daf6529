// WAN reservations of a communicator: resolving them at init, the pacing they imply, and the
// watcher that fails the communicator when one goes away (reservation.h).
#include "collectives/comm/reservation.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include "common/logging.h"
#include "common/net_address.h"
#include "common/split.h"

namespace detwan::collectives {
namespace {

// Inner IPv4 header + UDP header of each transport datagram: the gateway carries the whole
// inner packet, so these count against the reservation too.
constexpr int32_t kInnerIpUdpBytes = 28;
// The gateway polices each tunnel with a token bucket at exactly the reserved rate and the
// reservation's burst. A sender paced at exactly that rate leaves the bucket no slack: the
// spacing its packets lose on the way (host stack, veth, the gateway's batched reads) bunches
// them, and the bucket's level drifts until it runs dry (measured: ~0.05 % of packets policed
// at 100 % and the whole burst). So the site's ranks together pace at 98 % of the rate and may
// catch up at most half the burst; the gateway then never drops (tests/lab).
constexpr double kPacingShare = 0.98;
constexpr double kBurstShare = 0.5;

std::string join_prefixes(const std::vector<std::string>& prefixes) {
  std::string out;
  for (const auto& p : prefixes) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// Why a grant cannot carry the job now, or "".
std::string unusable(const TunnelGrant& g) {
  if (!g.provisioned()) {
    return fmt::format("reservation {} is not provisioned: state {}{}", g.describe(), g.state,
                       g.reason.empty() ? "" : " (" + g.reason + ")");
  }
  if (!g.dataplane_active) {
    return fmt::format(
        "reservation {} is provisioned but its tunnel is not active on every "
        "gateway yet (the agent's dataplane.active is false)",
        g.describe());
  }
  if (g.mtu_bytes <= kInnerIpUdpBytes) {
    return fmt::format("reservation {}: the agent reports no usable tunnel MTU ({} bytes)",
                       g.describe(), g.mtu_bytes);
  }
  return "";
}

// One round of questions to the agent: the first reservation that is gone or no longer
// provisioned, as the error the communicator fails with. An agent that does not answer sets
// *reached = false (and *away to why) and loses nothing: the tunnels work without it.
std::optional<std::string> check_round(const WanReservations& reservations, bool* reached,
                                       std::string* away) {
  for (const TunnelGrant& g : reservations.grants) {
    auto now = control::client::fetch_grant(reservations.agent, g.id);
    if (!now && now.error().code == ErrorCode::kNotFound) {
      return fmt::format("reservation {} is gone: {}", g.describe(), now.error().message);
    }
    if (!now) {
      *reached = false;
      if (away != nullptr) *away = now.error().message;
      continue;
    }
    if (!now->provisioned()) {
      return fmt::format(
          "reservation {} of sites {} and {} is no longer provisioned (state {}{}): the job's "
          "inter-site traffic has no tunnel",
          now->id, now->src, now->dst, now->state, now->reason.empty() ? "" : ": " + now->reason);
    }
  }
  return std::nullopt;
}

}  // namespace

const TunnelGrant* WanReservations::between(const std::string& a, const std::string& b) const {
  for (const TunnelGrant& g : grants) {
    if ((g.src == a && g.dst == b) || (g.src == b && g.dst == a)) return &g;
  }
  return nullptr;
}

std::string WanReservations::describe() const {
  std::string out;
  for (const TunnelGrant& g : grants) out += (out.empty() ? "" : ", ") + g.describe();
  return out;
}

Result<std::vector<std::string>> parse_reservation_ids(const std::string& text) {
  std::vector<std::string> ids;
  for (std::string_view piece : common::split(text, ',')) {
    std::string id(piece);
    id.erase(0, id.find_first_not_of(" \t"));
    id.erase(id.find_last_not_of(" \t") + 1);
    if (!id.empty()) {
      const bool ok = std::all_of(id.begin(), id.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_' || c == '.';
      });
      if (!ok || id.size() > 128) {
        return make_error(ErrorCode::kConfig,
                          fmt::format("reservation '{}': not a reservation id (like r-3)", id));
      }
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  if (ids.empty()) {
    return make_error(ErrorCode::kConfig, fmt::format("reservation '{}': no id in it", text));
  }
  return ids;
}

Result<std::string> local_address_in(const std::vector<std::string>& prefixes) {
  std::vector<common::IpPrefix> parsed;
  for (const auto& text : prefixes) {
    auto p = common::parse_ip_prefix(text);
    if (!p) return make_error(ErrorCode::kConfig, p.error().message);
    parsed.push_back(*p);
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return make_error(ErrorCode::kIo, fmt::format("getifaddrs: {}", std::strerror(errno)));
  }
  std::string found;
  for (ifaddrs* it = list; it != nullptr && found.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    common::IpAddress address;
    if (it->ifa_addr->sa_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
      std::memcpy(address.bytes, &sin->sin_addr, 4);
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      address.ipv6 = true;
      std::memcpy(address.bytes, &sin6->sin6_addr, 16);
    } else {
      continue;
    }
    for (const auto& prefix : parsed) {
      if (common::prefix_contains(prefix, address)) {
        found = common::format_ip_address(address);
        break;
      }
    }
  }
  freeifaddrs(list);
  if (found.empty()) {
    return make_error(
        ErrorCode::kNotFound,
        fmt::format("this host has no address in the tunnel prefixes {}", join_prefixes(prefixes)));
  }
  return found;
}

Result<WanReservations> resolve_reservations(
    const control::client::AgentAddress& agent, const std::vector<std::string>& ids,
    const std::string& site,
    const std::function<Result<std::string>(const std::vector<std::string>&)>& find_address) {
  if (agent.url.empty()) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("reservation {} given without an agent: set DETWAN_AGENT "
                                  "(e.g. http://127.0.0.1:7800) or CommConfig::agent_url",
                                  join_prefixes(ids)));
  }
  WanReservations out;
  out.agent = agent;
  for (const std::string& id : ids) {
    auto grant = control::client::fetch_grant(agent, id);
    if (!grant) {
      return make_error(
          grant.error().code == ErrorCode::kUnavailable || grant.error().code == ErrorCode::kTimeout
              ? ErrorCode::kUnavailable
              : ErrorCode::kConfig,
          grant.error().message);
    }
    if (std::string why = unusable(*grant); !why.empty()) {
      return make_error(ErrorCode::kConfig, why);
    }
    for (const TunnelGrant& other : out.grants) {
      if ((other.src == grant->src && other.dst == grant->dst) ||
          (other.src == grant->dst && other.dst == grant->src)) {
        return make_error(ErrorCode::kConfig,
                          fmt::format("reservations {} and {} both join sites {} and {}: give "
                                      "one per site pair",
                                      other.id, grant->id, grant->src, grant->dst));
      }
    }
    out.grants.push_back(std::move(*grant));
  }
  for (const TunnelGrant& g : out.grants) {
    if (!g.covers(site)) continue;
    auto address = find_address(g.prefixes_of(site));
    if (!address) {
      return make_error(ErrorCode::kConfig,
                        fmt::format("reservation {} at site {}: {}", g.describe(), site,
                                    address.error().message));
    }
    if (out.tunnel_host.empty()) {
      out.tunnel_host = *address;
    } else if (*address != out.tunnel_host) {
      return make_error(ErrorCode::kConfig,
                        fmt::format("reservations of site {} disagree on its tunnel address: {} "
                                    "(reservation {}) vs {}",
                                    site, *address, g.id, out.tunnel_host));
    }
  }
  if (out.tunnel_host.empty()) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("site '{}' (DETWAN_SITE) is in none of the reservations {}", site,
                                  out.describe()));
  }
  return out;
}

Result<void> check_site_pairs(const WanReservations& reservations,
                              const std::vector<std::string>& site_names) {
  for (size_t s = 0; s < site_names.size(); ++s) {
    for (size_t t = s + 1; t < site_names.size(); ++t) {
      if (reservations.between(site_names[s], site_names[t]) == nullptr) {
        return make_error(ErrorCode::kConfig,
                          fmt::format("the job has ranks at sites {} and {} but none of the "
                                      "reservations {} joins them",
                                      site_names[s], site_names[t], reservations.describe()));
      }
    }
  }
  return {};
}

TunnelPacing pacing_for(const TunnelGrant& grant, int64_t local_ranks, int32_t mtu_bytes) {
  const int64_t ranks = std::max<int64_t>(1, local_ranks);
  TunnelPacing p;
  p.rate_bps = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(grant.rate_bps) * kPacingShare) / ranks);
  p.frame_overhead_bytes = kInnerIpUdpBytes + grant.frame_overhead_bytes;
  p.mtu_bytes = std::min(mtu_bytes, grant.mtu_bytes);
  p.max_burst_bytes =
      static_cast<int64_t>(static_cast<double>(grant.burst_bytes) * kBurstShare) / ranks;
  return p;
}

ReservationWatch::ReservationWatch(WanReservations reservations, int64_t poll_interval_ns,
                                   std::function<void(const std::string&)> on_lost)
    : reservations_(std::move(reservations)),
      poll_interval_ns_(std::max<int64_t>(poll_interval_ns, 1'000'000)),
      on_lost_(std::move(on_lost)) {
  thread_ = std::thread([this] { run(); });
}

ReservationWatch::~ReservationWatch() { stop(); }

void ReservationWatch::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::optional<std::string> ReservationWatch::check_now() const {
  bool reached = true;
  return check_round(reservations_, &reached, nullptr);
}

void ReservationWatch::run() {
  auto log = common::logger("collectives");
  bool away_logged = false;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::nanoseconds(poll_interval_ns_), [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    bool reached = true;
    std::string away;
    std::optional<std::string> lost = check_round(reservations_, &reached, &away);
    if (!reached && !away_logged) {
      log->warn("reservation watch: {} (asking again every {} ms)", away,
                poll_interval_ns_ / 1'000'000);
    }
    away_logged = !reached;
    if (lost) {
      on_lost_(*lost);
      return;
    }
    lock.lock();
  }
}

}  // namespace detwan::collectives
