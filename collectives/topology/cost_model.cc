// The alpha-beta cost model. Every algorithm is written down as the steps it really runs
// (which rank sends how many bytes to which rank), and each step costs what its slowest link
// needs. Summary of the formulas (docs/collectives.md "Choosing an algorithm"):
//
//   link time     t(m) = alpha + m / rate_eff + (pieces - 1) * kPieceOverheadNs, pieces =
//                 ceil(m / chunk); rate_eff = rate, or kPiecesInFlight * chunk / RTT if more
//                 pieces than the window must cross a link whose RTT the window cannot cover.
//   ring (continuous pipelined ring, S steps of m): S * max(busy, first-piece latency)
//                 (+ alpha once when the link stays busy).
//   hd, fold/unfold, alltoall groups, gathers: sum of steps, each step = slowest link.
//   relays (tree, chain, hier broadcast): longest root-leaf path of (alpha + one piece) plus
//                 (pieces - 1) x the slowest link's time per piece.
//   hier allreduce: P = clamp(bytes / (chunk * L), 1, 8) pieces; reduce-scatter, WAN exchange
//                 and allgather of one piece, plus (P - 1) x the busiest phase per piece.
#include "collectives/topology/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace detwan::collectives {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kDefaultRateBps = 10'000'000'000;  // a rate of 0 means unknown
constexpr int64_t kDefaultChunkBytes = int64_t{4} << 20;  // what the algorithms use for 0
constexpr int64_t kMinChunkBytes = int64_t{256} << 10;
constexpr int64_t kMaxChunkBytes = int64_t{16} << 20;
// Matches the algorithms' receive window (algo/detail.h kRecvWindow) and per-message cost.
constexpr double kPiecesInFlight = 16;
constexpr double kPieceOverheadNs = 2'000;
constexpr int kAllToAllStepsInFlight = 4;
constexpr size_t kHierMaxPieces = 8;

constexpr std::array<Algorithm, 4> kConcrete = {Algorithm::kRing, Algorithm::kHalvingDoubling,
                                                Algorithm::kTree, Algorithm::kHierarchical};

struct Transfer {
  int from = 0;
  int to = 0;
  double bytes = 0;
};
using Step = std::vector<Transfer>;

class Model {
 public:
  Model(const Topology& topology, const NetworkModel& network, int64_t chunk_bytes)
      : topology_(topology),
        network_(network),
        chunk_(static_cast<double>(chunk_bytes > 0 ? chunk_bytes : kDefaultChunkBytes)) {}

  [[nodiscard]] int n() const { return topology_.size(); }
  [[nodiscard]] const Topology& topology() const { return topology_; }

  [[nodiscard]] double alpha(int from, int to) const {
    return static_cast<double>(network_.link(topology_, from, to).alpha_ns);
  }
  // Time the link is occupied by m bytes sent as chunk-sized pieces (no latency).
  [[nodiscard]] double busy(int from, int to, double bytes) const {
    if (bytes <= 0) return 0;
    const LinkModel& link = network_.link(topology_, from, to);
    const double rate = static_cast<double>(link.rate_bps > 0 ? link.rate_bps : kDefaultRateBps);
    const double pieces = std::ceil(bytes / chunk_);
    double rate_eff = rate;
    const double rtt_ns = 2.0 * static_cast<double>(link.alpha_ns);
    if (pieces > kPiecesInFlight && rtt_ns > 0) {
      rate_eff = std::min(rate, kPiecesInFlight * chunk_ * 8.0 * 1e9 / rtt_ns);
    }
    return bytes * 8.0 * 1e9 / rate_eff + (pieces - 1) * kPieceOverheadNs;
  }
  [[nodiscard]] double time(int from, int to, double bytes) const {
    return alpha(from, to) + busy(from, to, bytes);
  }
  [[nodiscard]] double piece(double bytes) const { return std::min(bytes, chunk_); }
  [[nodiscard]] double pieces(double bytes) const {
    return bytes <= 0 ? 1 : std::ceil(bytes / chunk_);
  }

  // Unpipelined steps: each starts when the previous one has completed everywhere.
  [[nodiscard]] double sequential(const std::vector<Step>& steps) const {
    double total = 0;
    for (const Step& step : steps) {
      double slowest = 0;
      for (const Transfer& t : step) slowest = std::max(slowest, time(t.from, t.to, t.bytes));
      total += slowest;
    }
    return total;
  }

  // A continuous pipelined ring of `steps` steps over `group` (in ring order), m bytes per
  // link per step: a step lasts as long as the busiest link, or as long as the first piece
  // takes to arrive if that is longer (then the ring stalls at every step).
  [[nodiscard]] double ring(const std::vector<int>& group, int steps, double bytes) const {
    if (steps <= 0 || group.size() < 2) return 0;
    double busiest = 0;
    double first_piece = 0;
    double slowest_alpha = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      const int from = group[i];
      const int to = group[(i + 1) % group.size()];
      busiest = std::max(busiest, busy(from, to, bytes));
      first_piece = std::max(first_piece, time(from, to, piece(bytes)));
      slowest_alpha = std::max(slowest_alpha, alpha(from, to));
    }
    if (busiest >= first_piece) return steps * busiest + slowest_alpha;
    return steps * first_piece;
  }
  [[nodiscard]] double ring_busy(const std::vector<int>& group, int steps, double bytes) const {
    double busiest = 0;
    for (size_t i = 0; i < group.size() && group.size() > 1; ++i) {
      busiest = std::max(busiest, busy(group[i], group[(i + 1) % group.size()], bytes));
    }
    return steps * busiest;
  }

  // A relay (every rank forwards each piece to its children as soon as it has it).
  // parent[r] = -1 for the root.
  [[nodiscard]] double relay(const std::vector<int>& parent, double bytes) const {
    std::vector<double> arrive(parent.size(), -1);
    double slowest_piece = 0;
    double last = 0;
    for (size_t r = 0; r < parent.size(); ++r) {
      last = std::max(last, arrival(parent, static_cast<int>(r), bytes, arrive));
      if (parent[r] >= 0) slowest_piece = std::max(slowest_piece, busy(parent[r], r, piece(bytes)));
    }
    return last + (pieces(bytes) - 1) * slowest_piece;
  }

 private:
  double arrival(const std::vector<int>& parent, int r, double bytes,
                 std::vector<double>& arrive) const {
    if (parent[r] < 0) return 0;
    if (arrive[r] >= 0) return arrive[r];
    arrive[r] = arrival(parent, parent[r], bytes, arrive) + time(parent[r], r, piece(bytes));
    return arrive[r];
  }

  const Topology& topology_;
  const NetworkModel& network_;
  double chunk_;
};

std::vector<int> iota_ranks(int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[r] = r;
  return ranks;
}

// Binomial tree rooted at 0: parent = r minus its lowest set bit.
std::vector<int> binomial_parents(int n) {
  std::vector<int> parent(static_cast<size_t>(n), -1);
  for (int r = 1; r < n; ++r) parent[r] = r - (r & -r);
  return parent;
}

std::vector<int> chain_parents(int n) {
  std::vector<int> parent(static_cast<size_t>(n), -1);
  for (int r = 1; r < n; ++r) parent[r] = r - 1;
  return parent;
}

// Root 0 -> the rank of local index 0 in every other site; a chain inside each site.
std::vector<int> site_relay_parents(const Topology& topology) {
  std::vector<int> parent(static_cast<size_t>(topology.size()), -1);
  for (int site = 0; site < topology.num_sites(); ++site) {
    const auto& ranks = topology.ranks_of_site(site);
    if (site != topology.site_of(0)) parent[ranks[0]] = 0;
    for (size_t i = 1; i < ranks.size(); ++i) parent[ranks[i]] = ranks[i - 1];
  }
  return parent;
}

// Recursive halving + doubling with the fold for non-powers of two (as the algorithm does).
double halving_doubling(const Model& m, double bytes) {
  const int n = m.n();
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;
  auto real = [&](int v) { return v < extra ? 2 * v : v + extra; };
  std::vector<Step> steps;
  if (extra > 0) {
    Step fold;
    for (int i = 0; i < extra; ++i) fold.push_back({2 * i + 1, 2 * i, bytes});
    steps.push_back(fold);
  }
  double part = bytes;
  for (int distance = p2 / 2; distance >= 1; distance /= 2) {
    part /= 2;
    Step step;
    for (int v = 0; v < p2; ++v) step.push_back({real(v), real(v ^ distance), part});
    steps.push_back(step);
  }
  for (int distance = 1; distance < p2; distance *= 2) {
    Step step;
    for (int v = 0; v < p2; ++v) step.push_back({real(v), real(v ^ distance), part});
    steps.push_back(step);
    part *= 2;
  }
  if (extra > 0) {
    Step unfold;
    for (int i = 0; i < extra; ++i) unfold.push_back({2 * i, 2 * i + 1, bytes});
    steps.push_back(unfold);
  }
  return m.sequential(steps);
}

// Reduce-scatter in each site, WAN exchange of the segments between the ranks holding them
// (with equal sites the shards, by equal local index; each rank sends its shard to every other
// site at once), allgather in each site; pieces overlap so
// only one piece's intra phases are not hidden behind the WAN. Equal pieces: the algorithm's
// ramped pieces (ramped_pieces) make the unhidden first and last phases shorter than this, so
// the estimate is conservative.
double hierarchical_all_reduce(const Model& m, int64_t chunk_bytes, double bytes) {
  const Topology& topology = m.topology();
  const int sites = topology.num_sites();
  if (sites == 1) {
    const int per_site = topology.ranks_per_site();
    return m.ring(topology.ranks_of_site(0), 2 * (per_site - 1), bytes / per_site);
  }
  const double chunk = static_cast<double>(chunk_bytes > 0 ? chunk_bytes : kDefaultChunkBytes);
  const auto pieces = static_cast<double>(std::clamp<size_t>(
      static_cast<size_t>(bytes / (chunk * topology.max_ranks_per_site())), 1, kHierMaxPieces));
  const double piece = bytes / pieces;
  double intra = 0;
  double intra_busy = 0;
  double inter = 0;
  double inter_busy = 0;
  for (int site = 0; site < sites; ++site) {
    const auto& group = topology.ranks_of_site(site);
    const auto size = static_cast<int>(group.size());
    intra = std::max(intra, m.ring(group, size - 1, piece / size));
    intra_busy = std::max(intra_busy, m.ring_busy(group, size - 1, piece / size));
  }
  // Every rank sends its whole shard to each other site at once (to its segments' owners
  // there), every site pair on its own path.
  for (int r = 0; r < m.n(); ++r) {
    const int site = topology.site_of(r);
    const double shard = piece / static_cast<double>(topology.ranks_of_site(site).size());
    for (int other = 0; other < sites; ++other) {
      if (other == site) continue;
      const int peer = topology.ranks_of_site(other).front();
      inter = std::max(inter, m.time(r, peer, shard));
      inter_busy = std::max(inter_busy, m.busy(r, peer, shard));
    }
  }
  return 2 * intra + inter + (pieces - 1) * std::max(intra_busy, inter_busy);
}

// Every rank sends its block to one rank of every other site (gather_holdings), then a ring
// inside each site moves what each rank holds.
double hierarchical_all_gather(const Model& m, double bytes) {
  const Topology& topology = m.topology();
  const double block = bytes / m.n();
  Step exchange;
  double intra = 0;
  for (int site = 0; site < topology.num_sites(); ++site) {
    const auto& ranks = topology.ranks_of_site(site);
    const std::vector<std::vector<int>> held = gather_holdings(topology, site);
    size_t width = 0;
    for (size_t l = 0; l < held.size(); ++l) {
      width = std::max(width, held[l].size());
      for (int from : held[l]) {
        if (from != ranks[l]) exchange.push_back({from, ranks[l], block});
      }
    }
    intra = std::max(intra, m.ring(ranks, static_cast<int>(ranks.size()) - 1,
                                   block * static_cast<double>(width)));
  }
  return m.sequential({exchange}) + intra;
}

bool runnable(Collective collective, Algorithm algorithm, const Topology& topology) {
  switch (collective) {
    case Collective::kAllReduce:
      return true;
    case Collective::kBroadcast:
      return algorithm != Algorithm::kHalvingDoubling;
    case Collective::kReduce:
      return algorithm == Algorithm::kRing || algorithm == Algorithm::kTree;
    case Collective::kAllGather:
      return algorithm == Algorithm::kRing ||
             (algorithm == Algorithm::kHierarchical && topology.num_sites() > 1);
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kSendRecv:
    case Collective::kBarrier:
      return algorithm == Algorithm::kRing;  // their one algorithm, reported as ring
  }
  return false;
}

double predict_concrete(Collective collective, Algorithm algorithm, int64_t bytes_in,
                        int64_t chunk_bytes, const Topology& topology,
                        const NetworkModel& network) {
  if (!runnable(collective, algorithm, topology)) return kInf;
  const Model m(topology, network, chunk_bytes);
  const int n = m.n();
  const auto bytes = static_cast<double>(std::max<int64_t>(bytes_in, 0));
  if (n <= 1 || (bytes == 0 && collective != Collective::kBarrier)) return 0;
  const std::vector<int> all = iota_ranks(n);
  switch (collective) {
    case Collective::kAllReduce:
      switch (algorithm) {
        case Algorithm::kRing: return m.ring(all, 2 * (n - 1), bytes / n);
        case Algorithm::kHalvingDoubling: return halving_doubling(m, bytes);
        case Algorithm::kTree: return 2 * m.relay(binomial_parents(n), bytes);
        default: return hierarchical_all_reduce(m, chunk_bytes, bytes);
      }
    case Collective::kBroadcast:
      switch (algorithm) {
        case Algorithm::kRing: return m.relay(chain_parents(n), bytes);
        case Algorithm::kTree: return m.relay(binomial_parents(n), bytes);
        default: return m.relay(site_relay_parents(topology), bytes);
      }
    case Collective::kReduce: {
      if (algorithm == Algorithm::kTree) return m.relay(binomial_parents(n), bytes);
      Step gather;
      for (int r = 1; r < n; ++r) gather.push_back({r, 0, bytes / n});
      return m.ring(all, n - 1, bytes / n) + m.sequential({gather});
    }
    case Collective::kAllGather:
      if (algorithm == Algorithm::kHierarchical) return hierarchical_all_gather(m, bytes);
      return m.ring(all, n - 1, bytes / n);
    case Collective::kReduceScatter:
      return m.ring(all, n - 1, bytes / n);
    case Collective::kAllToAll: {
      std::vector<Step> groups;
      for (int k = 1; k < n; ++k) {
        if ((k - 1) % kAllToAllStepsInFlight == 0) groups.emplace_back();
        for (int r = 0; r < n; ++r) groups.back().push_back({r, (r + k) % n, bytes / n});
      }
      return m.sequential(groups);
    }
    case Collective::kSendRecv: {
      // The peer is not known here: price the slowest pair of sites.
      double slowest = 0;
      for (int a = 0; a < n; ++a) {
        for (int b : {0, n - 1, topology.ranks_of_site(topology.num_sites() - 1).front()}) {
          if (a != b) slowest = std::max(slowest, m.time(a, b, bytes));
        }
      }
      return slowest;
    }
    case Collective::kBarrier: {
      std::vector<Step> rounds;
      for (int distance = 1; distance < n; distance *= 2) {
        Step round;
        for (int r = 0; r < n; ++r) round.push_back({r, (r + distance) % n, 0});
        rounds.push_back(round);
      }
      return m.sequential(rounds);
    }
  }
  return kInf;
}

std::string format_ns(double ns) {
  if (!std::isfinite(ns)) return "n/a";
  if (ns >= 1e9) return fmt::format("{:.3g} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3g} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.3g} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

std::string format_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) {
    return fmt::format("{} MiB", bytes >> 20);
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

struct Candidate {
  Algorithm algorithm = Algorithm::kRing;
  int64_t chunk_bytes = 0;
  double predicted_ns = kInf;
};

// The chunk size (256 KiB .. 16 MiB, powers of two) the model predicts fastest; ties go to
// the smaller chunk. A fixed chunk (override) is used as given.
Candidate best_for(Collective collective, Algorithm algorithm, int64_t bytes, int64_t fixed_chunk,
                   const Topology& topology, const NetworkModel& network) {
  Candidate best{algorithm, fixed_chunk, kInf};
  if (fixed_chunk > 0) {
    best.predicted_ns = predict_concrete(collective, algorithm, bytes, fixed_chunk, topology,
                                         network);
    return best;
  }
  for (int64_t chunk = kMinChunkBytes; chunk <= kMaxChunkBytes; chunk *= 2) {
    const double ns = predict_concrete(collective, algorithm, bytes, chunk, topology, network);
    if (ns < best.predicted_ns || best.chunk_bytes == 0) best = {algorithm, chunk, ns};
  }
  return best;
}

}  // namespace

const LinkModel& NetworkModel::link(const Topology& topology, int from_rank, int to_rank) const {
  if (topology.same_site(from_rank, to_rank)) return intra;
  const auto from = static_cast<size_t>(topology.site_of(from_rank));
  const auto to = static_cast<size_t>(topology.site_of(to_rank));
  // A model without inter-site entries (single-site setups, tests) prices every link as intra.
  if (from >= inter.size() || to >= inter[from].size()) return intra;
  return inter[from][to];
}

double predict_ns(Collective collective, Algorithm algorithm, int64_t bytes, int64_t chunk_bytes,
                  const Topology& topology, const NetworkModel& model) {
  if (algorithm == Algorithm::kAuto) {
    double best = kInf;
    for (Algorithm concrete : kConcrete) {
      best = std::min(best, predict_ns(collective, concrete, bytes, chunk_bytes, topology, model));
    }
    return best;
  }
  return predict_concrete(collective, algorithm, bytes, chunk_bytes, topology, model);
}

Plan choose_plan(Collective collective, int64_t bytes, const Topology& topology,
                 const NetworkModel& model, const PlanOverride& override) {
  std::vector<Candidate> candidates;
  for (Algorithm algorithm : kConcrete) {
    if (!runnable(collective, algorithm, topology)) continue;
    candidates.push_back(best_for(collective, algorithm, bytes, override.chunk_bytes, topology,
                                  model));
  }
  // Stable: among equal predictions the earlier algorithm (ring first) wins.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return a.predicted_ns < b.predicted_ns;
                   });
  Candidate chosen = candidates.front();
  std::string note;
  if (override.algorithm != Algorithm::kAuto) {
    const auto it = std::find_if(candidates.begin(), candidates.end(), [&](const Candidate& c) {
      return c.algorithm == override.algorithm;
    });
    if (it != candidates.end()) {
      chosen = *it;
      note = " (override)";
    } else {
      const auto ring = std::find_if(candidates.begin(), candidates.end(), [](const auto& c) {
        return c.algorithm == Algorithm::kRing;
      });
      chosen = ring != candidates.end() ? *ring : candidates.front();
      note = fmt::format(" (override {} cannot run {} on {}: fell back to {})",
                         to_string(override.algorithm), to_string(collective),
                         topology.describe(), to_string(chosen.algorithm));
    }
  }
  Plan plan;
  plan.algorithm = chosen.algorithm;
  plan.chunk_bytes = chosen.chunk_bytes;
  plan.predicted_ns = chosen.predicted_ns;
  plan.reason = fmt::format("{} chunk {}{}: {}, predicted {}", to_string(chosen.algorithm),
                            format_bytes(chosen.chunk_bytes), note, topology.describe(),
                            format_ns(chosen.predicted_ns));
  std::string others;
  for (const Candidate& c : candidates) {
    if (c.algorithm == chosen.algorithm) continue;
    others += fmt::format("{}{} {}", others.empty() ? "" : ", ", to_string(c.algorithm),
                          format_ns(c.predicted_ns));
  }
  if (!others.empty()) plan.reason += " (" + others + ")";
  return plan;
}

}  // namespace detwan::collectives
