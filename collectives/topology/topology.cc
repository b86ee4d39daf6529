#include "collectives/topology/topology.h"

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
