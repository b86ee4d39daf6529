#pragma once
// Which ranks share a site. Built once per communicator from every rank's site name (gathered
// at bootstrap); immutable afterwards, so any thread may read it.
//
// Sites are numbered 0..num_sites()-1 in order of their lowest rank; a site's ranks are listed
// ascending and a rank's local index is its position in that list.
#include <string>
#include <vector>

#include "collectives/types.h"

namespace detwan::collectives {

class Topology {
 public:
  // site_of_rank[r] = name of rank r's site. kInvalidArgument if empty or a name is empty.
  static Result<Topology> build(const std::vector<std::string>& site_of_rank);

  [[nodiscard]] int size() const { return static_cast<int>(site_index_.size()); }
  [[nodiscard]] int num_sites() const { return static_cast<int>(sites_.size()); }
  [[nodiscard]] int site_of(int rank) const { return site_index_[rank]; }
  [[nodiscard]] int local_index(int rank) const { return local_index_[rank]; }
  [[nodiscard]] const std::vector<int>& ranks_of_site(int site) const { return sites_[site]; }
  [[nodiscard]] const std::string& site_name(int site) const { return names_[site]; }
  [[nodiscard]] bool same_site(int a, int b) const { return site_index_[a] == site_index_[b]; }
  // Every site has the same number of ranks (what the hierarchical algorithms need).
  [[nodiscard]] bool uniform() const;
  [[nodiscard]] int ranks_per_site() const;  // uniform() only; else 0
  // "2 sites x 2 ranks (a: 0 1, b: 2 3)"
  [[nodiscard]] std::string describe() const;

 private:
  std::vector<int> site_index_;
  std::vector<int> local_index_;
  std::vector<std::vector<int>> sites_;
  std::vector<std::string> names_;
};

}  // namespace detwan::collectives
