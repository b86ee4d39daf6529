#pragma once
// A communicator that rides WAN reservations (CommConfig::reservation, DETWAN_RESERVATION +
// DETWAN_AGENT; docs/collectives.md "Reservations"). At init every rank asks detwan-agent for
// each reservation: it must be provisioned with its tunnels active, cover every pair of the
// job's sites, and the rank's host must hold an address inside its site's tunnel prefixes (the
// address its inter-site endpoint listens on, so that what it sends and receives is routed into
// the tunnel by both gateways). The channels then pace at the reserved rate counting every byte
// the tunnel adds, and fit the tunnel's MTU. While the communicator lives, a watcher asks the
// agent again every poll interval; a reservation that stops being provisioned fails the
// communicator with an error naming it, instead of a hang or a peer timeout.
//
// Setup tier (docs/errors.md): blocking HTTP with a timeout, errors name the agent, the
// reservation and the site.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/types.h"
#include "control/client/reservation_client.h"

namespace detwan::collectives {

using control::client::TunnelGrant;

// Reservations of a job, checked for this rank's site.
struct WanReservations {
  control::client::AgentAddress agent;
  std::vector<TunnelGrant> grants;
  std::string tunnel_host;  // this host's address inside its site's tunnel prefixes

  [[nodiscard]] bool empty() const { return grants.empty(); }
  // The reservation between two sites (either direction), or nullptr.
  [[nodiscard]] const TunnelGrant* between(const std::string& a, const std::string& b) const;
  // "r-3 (a<->b, 100mbit, provisioned), r-4 (...)"
  [[nodiscard]] std::string describe() const;
};

// Parses "r-3,r-4" (ids separated by commas; blanks ignored). kConfig naming a bad id.
Result<std::vector<std::string>> parse_reservation_ids(const std::string& text);

// The local address (getifaddrs) that lies in one of `prefixes`; kNotFound naming them.
Result<std::string> local_address_in(const std::vector<std::string>& prefixes);

// Fetches every id from the agent and checks it for a rank of `site`: provisioned, dataplane
// active, and (for those that cover `site`) the same local tunnel address for all. `site` must be
// covered by at least one. Errors (kConfig / kUnavailable) name the reservation and the site.
// `find_address` is local_address_in (tests inject their own).
Result<WanReservations> resolve_reservations(
    const control::client::AgentAddress& agent, const std::vector<std::string>& ids,
    const std::string& site,
    const std::function<Result<std::string>(const std::vector<std::string>&)>& find_address =
        local_address_in);

// Every pair of distinct sites of the job has a reservation; else kConfig naming the first pair
// without one.
Result<void> check_site_pairs(const WanReservations& reservations,
                              const std::vector<std::string>& site_names);

// The transport's view of one reservation for one rank: the rate of its own channel (the site's
// share of 98 % of the reservation among `local_ranks` ranks that all send), the per-datagram
// overhead the gateway counts (inner IPv4 20 + UDP 8 + the tunnel's frame overhead), the largest
// IP packet (the tunnel's MTU, at most `mtu_bytes`) and the pacer's burst (half the
// reservation's burst, shared by the local ranks). The margins keep the gateway's policer from
// ever acting (reservation.cc).
struct TunnelPacing {
  int64_t rate_bps = 0;
  int32_t frame_overhead_bytes = 0;
  int32_t mtu_bytes = 0;
  int64_t max_burst_bytes = 0;
};
[[nodiscard]] TunnelPacing pacing_for(const TunnelGrant& grant, int64_t local_ranks,
                                      int32_t mtu_bytes);

// Asks the agent about every reservation each poll interval; calls on_lost(message) once when one
// is no longer provisioned or the agent no longer knows it. An unreachable agent is logged, not
// fatal (the tunnels keep working while it restarts).
class ReservationWatch {
 public:
  ReservationWatch(WanReservations reservations, int64_t poll_interval_ns,
                   std::function<void(const std::string&)> on_lost);
  ~ReservationWatch();  // stops and joins
  ReservationWatch(const ReservationWatch&) = delete;
  ReservationWatch& operator=(const ReservationWatch&) = delete;

  // One round now (from any thread): the message on_lost would get, or nullopt.
  [[nodiscard]] std::optional<std::string> check_now() const;
  void stop();

 private:
  void run();

  WanReservations reservations_;
  int64_t poll_interval_ns_;
  std::function<void(const std::string&)> on_lost_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace detwan::collectives
