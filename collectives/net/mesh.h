#pragma once
// Connects one rank to every other rank of a communicator: one transport channel per pair.
//
// Each rank owns two endpoints: `intra` (shm/tcp, for ranks of its own site) and `inter` (the
// detwan transport, for ranks of other sites), both listening before connect_mesh() is called
// and their addresses published to every rank (the bootstrap's all-gather). Rank i connects to
// every j > i and accepts from every j < i; the connecting side's first message is a 48-byte
// hello that proves who called:
//   "dtwnmsh2" | u32 caller rank | u32 acceptor rank | HMAC-SHA256(hello key, label | those 16)
// with hello key = HKDF(communicator key, info "detwan mesh hello v1"). Only a member of the
// communicator can make one, and one made for another acceptor (or another communicator) does
// not verify. A hello that does not verify, names a rank that is not lower than the acceptor or
// that is already connected is refused: its channel is closed, counted (MeshStats) and logged,
// and the acceptor keeps waiting for the genuine peer until timeout_ns. Hellos are awaited on
// every accepted channel at once, so a caller that says nothing delays nobody. Connects run on
// a helper thread while the calling thread accepts, so no pair of ranks can wait on each other.
//
// Setup tier: may block up to timeout_ns; errors name the peer and the address.
#include <array>
#include <atomic>
#include <cstddef>
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

// The communicator's 32-byte key (Bootstrap::communicator_key()).
using MeshKey = std::array<std::byte, 32>;

// Hellos an acceptor refused (tests read them; each is also logged as a warning).
struct MeshStats {
  std::atomic<uint64_t> bad_hellos{0};       // not a hello, or its MAC does not verify
  std::atomic<uint64_t> unexpected_rank{0};  // verifies, but names a rank not awaited here
};

// channels[r] for every r != rank; channels[rank] = nullptr.
Result<std::vector<std::unique_ptr<transport::Channel>>> connect_mesh(
    int rank, const Topology& topology, const MeshEndpoints& endpoints,
    const std::vector<RankAddresses>& addresses, const ChannelOptionsFor& options_for,
    const MeshKey& key, int64_t timeout_ns, MeshStats* stats = nullptr);

// The hello `rank` sends to `peer` under the communicator key `key` (tests forge from it).
Result<std::vector<std::byte>> mesh_hello(const MeshKey& key, int rank, int peer);

}  // namespace detwan::collectives
