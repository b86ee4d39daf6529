// Communicator setup: endpoints, the bootstrap exchange of (site, addresses), topology, the
// channel mesh and the network model the cost model plans with.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/comm/comm_impl.h"
#include "collectives/comm/reservation.h"
#include "collectives/crypto.h"
#include "collectives/net/mesh.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/units.h"
#include "transport/pacing_group.h"
#include "transport/registry.h"

namespace detwan::collectives {
namespace {

constexpr int kRttSamples = 5;

int64_t now_ns() { return common::MonotonicClock().now_ns(); }

// A backend named "NAME" or "NAME:CONFIG" (DETWAN_INTER_BACKEND=udp:threads=2): the registry
// name, and CONFIG joined with the configuration given separately (backend_config).
struct BackendSpec {
  std::string name;
  std::string config;
};

BackendSpec backend_spec(const std::string& backend, const std::string& backend_config) {
  const size_t colon = backend.find(':');
  BackendSpec spec{backend.substr(0, colon), backend_config};
  if (colon != std::string::npos && colon + 1 < backend.size()) {
    const std::string inline_config = backend.substr(colon + 1);
    spec.config = spec.config.empty() ? inline_config : inline_config + "," + spec.config;
  }
  return spec;
}

// Backends addressed by name only (shm, loopback) listen on ""; socket backends on host:0.
std::string listen_address(const std::string& backend, const std::string& host) {
  const std::string name = backend_spec(backend, "").name;
  if (name == "shm" || name == "loopback") return "";
  return host + ":0";
}

Result<std::unique_ptr<transport::Endpoint>> open_endpoint(const std::string& role,
                                                           const std::string& backend,
                                                           const transport::ChannelOptions& accept,
                                                           const std::string& backend_config,
                                                           const transport::Security& security,
                                                           const EndpointFactory& make_endpoint) {
  const BackendSpec spec = backend_spec(backend, backend_config);
  transport::EndpointOptions options;
  options.accept_options = accept;
  options.backend_config = spec.config;
  options.security = security;
  auto endpoint = make_endpoint ? make_endpoint(spec.name, options)
                                : transport::make_endpoint(spec.name, options);
  if (!endpoint) {
    return make_error(endpoint.error().code,
                      fmt::format("{} backend '{}': {}", role, backend, endpoint.error().message));
  }
  return endpoint;
}

// Lowest rank of each site pings the lowest rank of every later site, pairs in one global
// order (so no two ranks wait on each other); the RTTs are all-gathered so that every rank
// builds the same model from the same numbers.
Result<std::vector<std::vector<int64_t>>> measure_site_rtts(Peers& peers, const Topology& topology,
                                                            Deadline deadline) {
  const int sites = topology.num_sites();
  const int me = peers.rank();
  std::vector<int64_t> mine(sites, 0);
  std::array<std::byte, 8> ping{};
  for (int s = 0; s < sites; ++s) {
    for (int t = s + 1; t < sites; ++t) {
      const int a = topology.ranks_of_site(s).front();
      const int b = topology.ranks_of_site(t).front();
      if (me != a && me != b) continue;
      int64_t best = std::numeric_limits<int64_t>::max();
      for (int i = 0; i < kRttSamples; ++i) {
        if (me == a) {
          const int64_t start = now_ns();
          auto sent = peers.send(b, ping);
          if (auto ok = peers.recv_into(b, ping, deadline); !ok) return std::unexpected(ok.error());
          if (auto ok = peers.wait(sent, deadline); !ok) return std::unexpected(ok.error());
          best = std::min(best, now_ns() - start);
        } else {
          if (auto ok = peers.recv_into(a, ping, deadline); !ok) return std::unexpected(ok.error());
          auto sent = peers.send(a, ping);
          if (auto ok = peers.wait(sent, deadline); !ok) return std::unexpected(ok.error());
        }
      }
      if (me == a) mine[t] = best;
    }
  }
  std::vector<int64_t> all(static_cast<size_t>(sites) * peers.size(), 0);
  algo::OpContext ctx{peers, topology, deadline, 0};
  if (auto ok = algo::all_gather(ctx, Algorithm::kRing, mine.data(), all.data(), mine.size(),
                                 DataType::kInt64);
      !ok) {
    return std::unexpected(ok.error());
  }
  std::vector<std::vector<int64_t>> rtt(sites, std::vector<int64_t>(sites, 0));
  for (int s = 0; s < sites; ++s) {
    const int leader = topology.ranks_of_site(s).front();
    for (int t = s + 1; t < sites; ++t) {
      rtt[s][t] = rtt[t][s] = all[static_cast<size_t>(leader) * sites + t];
    }
  }
  return rtt;
}

// A reservation's pacing into channel options (first: replace; else: keep the more cautious).
void apply_pacing(transport::ChannelOptions& options, const TunnelPacing& p, bool first) {
  if (first) {
    options.rate_bps = p.rate_bps;
    options.frame_overhead_bytes = p.frame_overhead_bytes;
    options.mtu_bytes = p.mtu_bytes;
    options.max_burst_bytes = p.max_burst_bytes;
    return;
  }
  options.rate_bps = std::min(options.rate_bps, p.rate_bps);
  options.frame_overhead_bytes = std::max(options.frame_overhead_bytes, p.frame_overhead_bytes);
  options.mtu_bytes = std::min(options.mtu_bytes, p.mtu_bytes);
  options.max_burst_bytes = std::min(options.max_burst_bytes, p.max_burst_bytes);
}

// The payload share of a tunnel's reserved rate: each datagram of `mtu` bytes (inner IP packet)
// carries mtu - 28 bytes of UDP payload and costs mtu + the gateway's frame overhead.
int64_t tunnel_goodput_bps(const TunnelGrant& grant, int32_t mtu_bytes) {
  const int32_t mtu = std::min(mtu_bytes, grant.mtu_bytes);
  return static_cast<int64_t>(static_cast<double>(grant.rate_bps) * (mtu - 28) /
                              (mtu + grant.frame_overhead_bytes));
}

int64_t wan_fanout(const Topology& topology, int rank, int site) {
  std::vector<int> owners;
  for (const SiteSegment& segment : site_segments(topology, size_t{1} << 30, rank)) {
    owners.push_back(segment.owners[static_cast<size_t>(site)]);
  }
  std::sort(owners.begin(), owners.end());
  return std::max<int64_t>(1, std::unique(owners.begin(), owners.end()) - owners.begin());
}

Result<NetworkModel> build_model(Peers* peers, const Topology& topology, const CommConfig& config,
                                 const WanReservations* wan, Deadline deadline) {
  NetworkModel model;
  model.intra = LinkModel{kIntraAlphaNs, kIntraRateBps};
  const int sites = topology.num_sites();
  std::vector<std::vector<int64_t>> rtt(sites, std::vector<int64_t>(sites, config.wan_rtt_ns));
  if (!config.deterministic && sites > 1 && peers != nullptr) {
    auto measured = measure_site_rtts(*peers, topology, deadline);
    if (!measured) return std::unexpected(measured.error());
    rtt = std::move(*measured);
  }
  const int64_t wan_rate = config.wan_rate_bps > 0 ? config.wan_rate_bps : kBestEffortWanRateBps;
  model.inter.assign(sites, std::vector<LinkModel>(sites));
  for (int s = 0; s < sites; ++s) {
    const auto local = static_cast<int64_t>(topology.ranks_of_site(s).size());
    for (int t = 0; t < sites; ++t) {
      if (s == t) {
        model.inter[s][t] = model.intra;
        continue;
      }
      int64_t rate = wan_rate;
      int64_t alpha = rtt[s][t] / 2;
      if (wan != nullptr) {
        // The reservation: its payload rate, and (deterministic) its bound as the latency.
        const TunnelGrant* g = wan->between(topology.site_name(s), topology.site_name(t));
        if (g != nullptr) {
          rate = tunnel_goodput_bps(*g, config.mtu_bytes);
          if (config.deterministic) alpha = g->max_latency_ns;
        }
      }
      // Every local rank of site s drives its own share of the tunnel in parallel.
      model.inter[s][t] =
          LinkModel{std::max<int64_t>(1, alpha), std::max<int64_t>(1, rate / local)};
    }
  }
  return model;
}

void log_start(const Communicator::Impl& impl) {
  auto log = common::logger("collectives");
  log->info("communicator of {} ranks: {}", impl.size, impl.config.describe());
  if (impl.config.channel_security == transport::SecurityMode::kNone) {
    log->warn("channels UNAUTHENTICATED: DETWAN_CHANNEL_SECURITY=none asked for it (anyone who "
              "reaches a rank's endpoints can inject into this job)");
  }
  log->info("topology: {}", impl.topology.describe());
  std::string inter;
  const int sites = impl.topology.num_sites();
  for (int s = 0; s < sites; ++s) {
    for (int t = 0; t < sites; ++t) {
      if (s == t) continue;
      const LinkModel& link = impl.model.inter[s][t];
      inter += fmt::format(" {}->{}: alpha {} rate {}/channel;", impl.topology.site_name(s),
                           impl.topology.site_name(t), human_ns(static_cast<double>(link.alpha_ns)),
                           common::format_rate_bps(static_cast<uint64_t>(link.rate_bps)));
    }
  }
  log->info("model: intra alpha {} rate {} (defaults);{}{}{}",
            human_ns(static_cast<double>(impl.model.intra.alpha_ns)),
            common::format_rate_bps(static_cast<uint64_t>(impl.model.intra.rate_bps)), inter,
            sites > 1 ? (impl.config.deterministic ? " inter alpha configured (deterministic)"
                                                   : " inter alpha = measured RTT / 2")
                      : " one site",
            sites > 1 && impl.config.wan_rate_bps <= 0 && !impl.wan
                ? "; WAN rate best effort: the model assumes 1gbit per site pair"
                : "");
  if (impl.wan) {
    for (const TunnelGrant& g : impl.wan->grants) {
      log->info(
          "reservation {}: {} each way, bound max_latency {} max_latency_variation {} ({}), "
          "tunnel MTU {} + {} bytes per frame, burst {} bytes; this rank's tunnel address {}",
          g.id, common::format_rate_bps(static_cast<uint64_t>(g.rate_bps)),
          human_ns(static_cast<double>(g.max_latency_ns)),
          human_ns(static_cast<double>(g.max_latency_variation_ns)), g.delivery, g.mtu_bytes,
          g.frame_overhead_bytes, g.burst_bytes, impl.wan->tunnel_host);
    }
  }
}

// The reservations of config.reservation, checked for this rank's site (reservation.h).
Result<std::optional<WanReservations>> reservations_for(int rank, const CommConfig& config) {
  if (config.reservation.empty()) return std::optional<WanReservations>();
  auto ids = parse_reservation_ids(config.reservation);
  if (!ids) return std::unexpected(ids.error());
  control::client::AgentAddress agent{config.agent_url, config.agent_token, 5000};
  auto wan = resolve_reservations(agent, *ids, config.site);
  if (!wan) {
    return make_error(wan.error().code,
                      fmt::format("rank {} (site {}): {}", rank, config.site, wan.error().message));
  }
  return std::optional<WanReservations>(std::move(*wan));
}

}  // namespace

transport::Security communicator_security(const CommKey& key, const CommConfig& config) {
  return transport::Security::keyed(key, config.channel_security, "detwan collectives v1");
}

Result<CommKey> split_key(const CommKey& parent, uint64_t split_index, int color,
                          const std::vector<int>& members) {
  std::string info = "detwan comm v1 split";
  info += crypto::field(std::to_string(split_index));
  info += crypto::field(std::to_string(color));
  for (int member : members) info += crypto::field(std::to_string(member));
  return crypto::derive_key(crypto::view(parent), "", info);
}

Result<CommKey> lane_key(const CommKey& parent, int lane) {
  std::string info = "detwan comm v1 lane";
  info += crypto::field(std::to_string(lane));
  return crypto::derive_key(crypto::view(parent), "", info);
}

Result<std::unique_ptr<Communicator::Impl>> build_communicator(
    Bootstrap& bootstrap, int rank, int nranks, const CommConfig& config,
    const EndpointFactory& make_endpoint, const PacingGroups* inherited_pacing) {
  if (config.site.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "site: empty site name");
  }
  if (config.timeout_ns <= 0 || config.setup_timeout_ns <= 0 || config.peer_timeout_ns <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "timeout_ns, setup_timeout_ns and peer_timeout_ns must be > 0");
  }
  if (config.wan_rate_bps < 0 || config.chunk_bytes < 0 || config.wan_rtt_ns < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "wan_rate_bps, chunk_bytes and wan_rtt_ns must be >= 0");
  }
  auto wan = reservations_for(rank, config);
  if (!wan) return std::unexpected(wan.error());
  auto impl = std::make_unique<Communicator::Impl>();
  impl->wan = std::move(*wan);
  impl->rank = rank;
  impl->size = nranks;
  impl->config = config;
  impl->timeout_ns.store(config.timeout_ns);
  impl->listen_host = config.listen_host.empty() ? bootstrap.local_host() : config.listen_host;
  impl->key = bootstrap.communicator_key();
  const transport::Security security = communicator_security(impl->key, config);
  const int64_t deadline_ns = now_ns() + config.setup_timeout_ns;

  transport::ChannelOptions same_site;
  same_site.peer_timeout_ns = config.peer_timeout_ns;
  transport::ChannelOptions other_site = same_site;
  other_site.mtu_bytes = config.mtu_bytes;
  // Channels the inter endpoint accepts get their options before the topology is known
  // (transport::EndpointOptions is fixed at creation): assume two sites of equal size for
  // their rate; the connecting side (options_for below) uses the exact share.
  transport::ChannelOptions accepted_other = other_site;
  accepted_other.rate_bps = config.wan_rate_bps / std::max(1, nranks / 2);
  if (impl->wan) {
    // The same guess per reservation of this site: the slowest, so no tunnel is over-run.
    const int sites = std::max<int>(2, static_cast<int>(impl->wan->grants.size()) + 1);
    bool first = true;
    for (const TunnelGrant& g : impl->wan->grants) {
      if (!g.covers(config.site)) continue;
      const TunnelPacing p = pacing_for(g, std::max(1, nranks / sites), config.mtu_bytes);
      apply_pacing(accepted_other, p, first);
      first = false;
    }
  }

  auto intra = open_endpoint("intra", config.intra_backend, same_site, config.intra_backend_config,
                             security, make_endpoint);
  if (!intra) return std::unexpected(intra.error());
  impl->intra_endpoint = std::move(*intra);
  auto inter = open_endpoint("inter", config.inter_backend, accepted_other,
                             config.inter_backend_config, security, make_endpoint);
  if (!inter) return std::unexpected(inter.error());
  impl->inter_endpoint = std::move(*inter);
  auto intra_address =
      impl->intra_endpoint->listen(listen_address(config.intra_backend, impl->listen_host));
  if (!intra_address) {
    return make_error(
        intra_address.error().code,
        fmt::format("rank {}: intra endpoint ({}) listen on '{}': {}", rank, config.intra_backend,
                    impl->listen_host, intra_address.error().message));
  }
  // With reservations the inter-site endpoint listens on the tunnel address: what it sends leaves
  // from there and what it is sent goes there, both routed into the tunnel by the gateways.
  const std::string inter_host = impl->wan ? impl->wan->tunnel_host : impl->listen_host;
  auto inter_address =
      impl->inter_endpoint->listen(listen_address(config.inter_backend, inter_host));
  if (!inter_address) {
    return make_error(inter_address.error().code,
                      fmt::format("rank {}: inter endpoint ({}) listen on '{}': {}", rank,
                                  config.inter_backend, inter_host, inter_address.error().message));
  }

  auto blobs = bootstrap.exchange(encode_fields({config.site, *intra_address, *inter_address}),
                                  std::max<int64_t>(1, deadline_ns - now_ns()));
  if (!blobs) return std::unexpected(blobs.error());
  if (static_cast<int>(blobs->size()) != nranks) {
    return make_error(ErrorCode::kInternal, fmt::format("bootstrap returned {} blobs for {} ranks",
                                                        blobs->size(), nranks));
  }
  std::vector<std::string> sites(nranks);
  std::vector<RankAddresses> addresses(nranks);
  for (int r = 0; r < nranks; ++r) {
    auto fields = decode_fields((*blobs)[r]);
    if (!fields || fields->size() != 3) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("rank {}: malformed bootstrap blob from rank {} ('{}')", rank,
                                    r, (*blobs)[r]));
    }
    sites[r] = (*fields)[0];
    addresses[r] = RankAddresses{(*fields)[1], (*fields)[2]};
  }
  auto topology = Topology::build(sites);
  if (!topology) return std::unexpected(topology.error());
  impl->topology = std::move(*topology);

  const Topology& topo = impl->topology;
  if (impl->wan) {
    std::vector<std::string> site_names;
    for (int s = 0; s < topo.num_sites(); ++s) site_names.push_back(topo.site_name(s));
    if (auto ok = check_site_pairs(*impl->wan, site_names); !ok) {
      return make_error(ok.error().code, fmt::format("rank {}: {}", rank, ok.error().message));
    }
  }
  // This rank's share of a site pair's rate: 1 / (its site's ranks), split again over the ranks
  // of the other site it sends to at once (wan_fanout; 1 with equal sites), so that what the
  // site's ranks send together never exceeds the reservation.
  const auto local_ranks = static_cast<int64_t>(topo.ranks_of_site(topo.site_of(rank)).size());
  auto options_for = [&](int peer) {
    if (topo.same_site(rank, peer)) return same_site;
    const int64_t sharers = local_ranks * wan_fanout(topo, rank, topo.site_of(peer));
    transport::ChannelOptions options = other_site;
    options.rate_bps = config.wan_rate_bps / sharers;
    if (impl->wan) {
      const TunnelGrant* g = impl->wan->between(config.site, topo.site_name(topo.site_of(peer)));
      if (g != nullptr) apply_pacing(options, pacing_for(*g, sharers, config.mtu_bytes), true);
    }
    return options;
  };
  auto channels =
      connect_mesh(rank, topo, {impl->intra_endpoint.get(), impl->inter_endpoint.get()}, addresses,
                   options_for, impl->key, std::max<int64_t>(1, deadline_ns - now_ns()));
  if (!channels) return std::unexpected(channels.error());
  // One pacing group per other site: this rank's share of the pair's rate (1 / its site's
  // ranks), which its channels toward that site (one per rank there, and those of the
  // communicator's lanes) keep together. Each channel keeps share / fanout (the peers there it
  // sends to at once): pacing the three channels of a 1-rank site at the whole share each, the
  // group alone keeping their sum, made a 64 MiB allreduce on 3 + 1 ranks 1.22x slower in the
  // lab (7.19 s against 5.88 s). Channels this rank accepted were paced by a guess
  // (accepted_other): now the exact share too.
  // With one lane (inflight_ops 1, and not a lane itself) the channels' own rates already keep
  // the sum and no group is made: the single-lane path stays as it was measured.
  const bool lanes = config.inflight_ops > 1 || inherited_pacing != nullptr;
  impl->wan_pacing.assign(static_cast<size_t>(topo.num_sites()), nullptr);
  for (int s = 0; s < topo.num_sites(); ++s) {
    if (s == topo.site_of(rank)) continue;
    transport::ChannelOptions share = other_site;
    share.rate_bps = config.wan_rate_bps / local_ranks;
    if (impl->wan) {
      const TunnelGrant* g = impl->wan->between(config.site, topo.site_name(s));
      if (g != nullptr) apply_pacing(share, pacing_for(*g, local_ranks, config.mtu_bytes), true);
    }
    if (share.rate_bps <= 0) continue;  // best effort: congestion control, no group
    auto& group = impl->wan_pacing[static_cast<size_t>(s)];
    if (inherited_pacing != nullptr &&
        static_cast<int>(inherited_pacing->size()) == topo.num_sites()) {
      group = (*inherited_pacing)[static_cast<size_t>(s)];
    } else if (lanes) {
      group = transport::PacingGroup::reserved(share.rate_bps, share.mtu_bytes,
                                               share.frame_overhead_bytes, share.max_burst_bytes);
    }
    for (int p : topo.ranks_of_site(s)) {
      if ((*channels)[p] == nullptr) continue;
      const transport::ChannelOptions options = options_for(p);
      (*channels)[p]->set_reserved_rate(options.rate_bps, options.max_burst_bytes);
      if (group) (*channels)[p]->set_pacing_group(group);
    }
  }
  std::vector<std::string> names(nranks);
  for (int p = 0; p < nranks; ++p) {
    names[p] = fmt::format("rank {} (site {})", p, topo.site_name(topo.site_of(p)));
  }
  impl->peers = std::make_unique<Peers>(rank, std::move(*channels), std::move(names));

  auto model = build_model(impl->peers.get(), topo, config, impl->wan ? &*impl->wan : nullptr,
                           Deadline{deadline_ns});
  if (!model) {
    return make_error(model.error().code, fmt::format("rank {}: measuring the network: {}", rank,
                                                      model.error().message));
  }
  impl->model = std::move(*model);
  if (rank == 0) log_start(*impl);
  if (impl->wan) {
    Communicator::Impl* raw = impl.get();
    impl->watch = std::make_unique<ReservationWatch>(
        *impl->wan, config.reservation_poll_ns, [raw](const std::string& why) {
          const Error error{ErrorCode::kUnavailable, fmt::format("rank {}: {}", raw->rank, why)};
          common::logger("collectives")->error("{}", error.message);
          raw->peers->fail(-1, error);
          raw->fail(error);
        });
  }
  impl->executor = std::make_unique<Executor>();
  return impl;
}

std::string encode_fields(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += '|';
    for (char c : fields[i]) {
      if (c == '|' || c == '\\') out += '\\';
      out += c;
    }
  }
  return out;
}

Result<std::vector<std::string>> decode_fields(std::string_view text) {
  std::vector<std::string> fields(1);
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      if (i + 1 == text.size()) {
        return make_error(ErrorCode::kInvalidArgument, "blob ends in a lone escape");
      }
      fields.back() += text[++i];
    } else if (c == '|') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

Result<std::vector<std::string>> all_gather_blobs(Peers& peers, const Topology& topology,
                                                  const std::string& mine, Deadline deadline) {
  const int n = peers.size();
  std::vector<std::string> blobs(n);
  if (n == 1) {
    blobs[0] = mine;
    return blobs;
  }
  algo::OpContext ctx{peers, topology, deadline, 0};
  const auto my_size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(n, 0);
  if (auto ok =
          algo::all_gather(ctx, Algorithm::kRing, &my_size, sizes.data(), 1, DataType::kInt64);
      !ok) {
    return std::unexpected(ok.error());
  }
  const int64_t padded = std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  std::vector<char> send(static_cast<size_t>(padded), '\0');
  std::memcpy(send.data(), mine.data(), mine.size());
  std::vector<char> all(static_cast<size_t>(padded) * n);
  if (auto ok = algo::all_gather(ctx, Algorithm::kRing, send.data(), all.data(),
                                 static_cast<size_t>(padded), DataType::kInt8);
      !ok) {
    return std::unexpected(ok.error());
  }
  for (int r = 0; r < n; ++r) {
    if (sizes[r] < 0 || sizes[r] > padded) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("rank {} announced a blob of {} bytes", r, sizes[r]));
    }
    blobs[r].assign(all.data() + static_cast<size_t>(r) * padded, static_cast<size_t>(sizes[r]));
  }
  return blobs;
}

}  // namespace detwan::collectives
