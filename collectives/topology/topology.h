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
  [[nodiscard]] int max_ranks_per_site() const;
  // "2 sites x 2 ranks (a: 0 1, b: 2 3)"
  [[nodiscard]] std::string describe() const;

 private:
  std::vector<int> site_index_;
  std::vector<int> local_index_;
  std::vector<std::vector<int>> sites_;
  std::vector<std::string> names_;
};

// A buffer of `count` elements split by every site into as many consecutive blocks as it has
// ranks (local index l holds block l; the first count % L blocks one element longer, as
// algo::block_of splits) is cut by all the sites' block boundaries together into segments.
// Each segment lies in exactly one block per site: owners[s] is the rank holding it in site s.
// With equal sites the segments are the blocks.
struct SiteSegment {
  size_t offset = 0;
  size_t count = 0;
  std::vector<int> owners;
};
// Segments in buffer order (none empty); those of `rank` only when rank >= 0.
[[nodiscard]] std::vector<SiteSegment> site_segments(const Topology& topology, size_t count,
                                                     int rank = -1);

// A site-aware allgather's WAN exchange sends each rank's block to one rank of every other
// site: local index l to local index l mod L_site there. held[m] lists the ranks whose blocks
// local index m of `site` holds after it: its own, and those sent to it, in (site, local
// index) order. With equal sites every holder holds one block per site.
[[nodiscard]] std::vector<std::vector<int>> gather_holdings(const Topology& topology, int site);

}  // namespace detwan::collectives
