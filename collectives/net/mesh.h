#pragma once
// Connects one rank to every other rank of a communicator: one transport channel per pair.
//
// Each rank owns two endpoints: `intra` (shm/tcp, for ranks of its own site) and `inter` (the
// detwan transport, for ranks of other sites), both listening before connect_mesh() is called
// and their addresses published to every rank (the bootstrap's all-gather). Rank i connects to
// every j > i and accepts from every j < i; the connecting side's first message is a 12-byte
// hello (magic, its rank) so the acceptor knows who called. Connects run on a helper thread
// while the calling thread accepts, so no pair of ranks can wait on each other.
//
// Setup tier: may block up to timeout_ns; errors name the peer and the address.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/topology/topology.h"
#include "transport/transport.h"

namespace detwan::collectives {

struct RankAddresses {
  std::string intra;  // the intra endpoint's listen() result
  std::string inter;  // the inter endpoint's listen() result
};

struct MeshEndpoints {
  transport::Endpoint* intra = nullptr;  // used for peers of the same site
  transport::Endpoint* inter = nullptr;  // used for peers of other sites
};

// Channel options for the channel from `rank` to `peer` (rate, paths, timeouts).
using ChannelOptionsFor = std::function<transport::ChannelOptions(int peer)>;

// channels[r] for every r != rank; channels[rank] = nullptr.
Result<std::vector<std::unique_ptr<transport::Channel>>> connect_mesh(
    int rank, const Topology& topology, const MeshEndpoints& endpoints,
    const std::vector<RankAddresses>& addresses, const ChannelOptionsFor& options_for,
    int64_t timeout_ns);

}  // namespace detwan::collectives
