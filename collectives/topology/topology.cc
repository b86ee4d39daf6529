#include "collectives/topology/topology.h"

#include <algorithm>

#include <fmt/format.h>

#include <unordered_map>

namespace detwan::collectives {

Result<Topology> Topology::build(const std::vector<std::string>& site_of_rank) {
  if (site_of_rank.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "topology: no ranks (empty site list)");
  }
  Topology topology;
  std::unordered_map<std::string, int> index_of_name;
  topology.site_index_.reserve(site_of_rank.size());
  topology.local_index_.reserve(site_of_rank.size());
  for (size_t rank = 0; rank < site_of_rank.size(); ++rank) {
    const std::string& name = site_of_rank[rank];
    if (name.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("topology: rank {} has an empty site name", rank));
    }
    // Ranks are visited in ascending order, so sites get numbers in order of their lowest
    // rank and each site's rank list comes out sorted.
    auto [it, inserted] = index_of_name.try_emplace(name, topology.num_sites());
    if (inserted) {
      topology.sites_.emplace_back();
      topology.names_.push_back(name);
    }
    const int site = it->second;
    topology.site_index_.push_back(site);
    topology.local_index_.push_back(static_cast<int>(topology.sites_[site].size()));
    topology.sites_[site].push_back(static_cast<int>(rank));
  }
  return topology;
}

bool Topology::uniform() const {
  for (const auto& ranks : sites_) {
    if (ranks.size() != sites_.front().size()) return false;
  }
  return !sites_.empty();
}

int Topology::ranks_per_site() const {
  return uniform() ? static_cast<int>(sites_.front().size()) : 0;
}

int Topology::max_ranks_per_site() const {
  size_t most = 0;
  for (const auto& ranks : sites_) most = std::max(most, ranks.size());
  return static_cast<int>(most);
}

namespace {

// Index of the block (of `blocks` over `count` elements, split as algo::block_of) holding
// element `at` < count.
size_t block_holding(size_t count, size_t blocks, size_t at) {
  const size_t base = count / blocks;
  const size_t extra = count % blocks;
  const size_t long_part = extra * (base + 1);
  if (at < long_part) return at / (base + 1);
  return extra + (at - long_part) / base;  // base > 0 here: at < count
}

}  // namespace

std::vector<SiteSegment> site_segments(const Topology& topology, size_t count, int rank) {
  const int sites = topology.num_sites();
  std::vector<size_t> cuts{0, count};
  for (int site = 0; site < sites; ++site) {
    const size_t blocks = topology.ranks_of_site(site).size();
    const size_t base = count / blocks;
    const size_t extra = count % blocks;
    for (size_t l = 1; l < blocks; ++l) cuts.push_back(l * base + std::min(l, extra));
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<SiteSegment> out;
  const int my_site = rank >= 0 ? topology.site_of(rank) : -1;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    SiteSegment segment{cuts[i], cuts[i + 1] - cuts[i], {}};
    if (segment.count == 0) continue;
    for (int site = 0; site < sites; ++site) {
      const auto& ranks = topology.ranks_of_site(site);
      segment.owners.push_back(ranks[block_holding(count, ranks.size(), segment.offset)]);
    }
    if (my_site < 0 || segment.owners[static_cast<size_t>(my_site)] == rank) {
      out.push_back(std::move(segment));
    }
  }
  return out;
}

std::vector<std::vector<int>> gather_holdings(const Topology& topology, int site) {
  const size_t here = topology.ranks_of_site(site).size();
  std::vector<std::vector<int>> held(here);
  for (int s = 0; s < topology.num_sites(); ++s) {
    const auto& ranks = topology.ranks_of_site(s);
    for (size_t l = 0; l < ranks.size(); ++l) held[s == site ? l : l % here].push_back(ranks[l]);
  }
  return held;
}

std::string Topology::describe() const {
  std::string out;
  if (uniform()) {
    out = fmt::format("{} site{} x {} rank{}", num_sites(), num_sites() == 1 ? "" : "s",
                      ranks_per_site(), ranks_per_site() == 1 ? "" : "s");
  } else {
    out = fmt::format("{} sites, {} ranks (non-uniform)", num_sites(), size());
  }
  out += " (";
  for (int site = 0; site < num_sites(); ++site) {
    if (site > 0) out += ", ";
    out += names_[site];
    out += ':';
    for (int rank : sites_[site]) out += fmt::format(" {}", rank);
  }
  out += ')';
  return out;
}

}  // namespace detwan::collectives
