#pragma once
// An in-process communicator mesh for algorithm tests: N ranks, each with its own loopback
// endpoint (optionally with injected faults), fully connected with connect_mesh(), one Peers
// per rank. run_ranks() runs a function on every rank in its own thread (the executor's role)
// and returns each rank's result.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/net/mesh.h"
#include "collectives/net/peers.h"
#include "collectives/topology/topology.h"
#include "common/clock.h"
#include "transport/registry.h"

namespace detwan::collectives::testing {

inline constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,  DataType::kInt32,   DataType::kUint32,
    DataType::kInt64,   DataType::kUint64, DataType::kFloat16, DataType::kBfloat16,
    DataType::kFloat32, DataType::kFloat64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax,
                                       ReduceOp::kMin, ReduceOp::kAvg};

// splitmix64 finaliser: a seeded, platform-independent hash for test inputs.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Mesh {
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints;
  std::vector<std::unique_ptr<Peers>> peers;  // destroyed before the endpoints
  Topology topology;

  ~Mesh() { peers.clear(); }
};

// The communicator key of the test meshes (a real communicator derives one from its
// bootstrap secret).
inline MeshKey test_mesh_key() {
  MeshKey key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(0xa0 + i);
  return key;
}

// sites: site name of each rank (its size is the rank count). faults: the loopback
// backend_config ("" = perfect; e.g. "loss=0.01,reorder=0.05,seed=7").
inline std::unique_ptr<Mesh> make_mesh(const std::vector<std::string>& sites,
                                       const std::string& faults = "") {
  auto mesh = std::make_unique<Mesh>();
  auto topology = Topology::build(sites);
  if (!topology) {
    ADD_FAILURE() << topology.error().message;
    return nullptr;
  }
  mesh->topology = *topology;
  const int n = static_cast<int>(sites.size());
  std::vector<RankAddresses> addresses(n);
  transport::EndpointOptions options;
  options.backend_config = faults;
  options.security =
      transport::Security::keyed(test_mesh_key(), transport::SecurityMode::kAuthenticate, "test");
  options.accept_options.peer_timeout_ns = 20'000'000'000;
  options.accept_options.min_rto_ns = 2'000'000;
  options.accept_options.initial_rtt_ns = 5'000'000;
  for (int r = 0; r < n; ++r) {
    auto endpoint = transport::make_endpoint("loopback", options);
    if (!endpoint) {
      ADD_FAILURE() << endpoint.error().message;
      return nullptr;
    }
    auto address = (*endpoint)->listen("");
    if (!address) {
      ADD_FAILURE() << address.error().message;
      return nullptr;
    }
    addresses[r] = {*address, *address};
    mesh->endpoints.push_back(std::move(*endpoint));
  }
  std::vector<std::future<Result<std::vector<std::unique_ptr<transport::Channel>>>>> futures;
  for (int r = 0; r < n; ++r) {
    futures.push_back(std::async(std::launch::async, [&, r] {
      MeshEndpoints endpoints{mesh->endpoints[r].get(), mesh->endpoints[r].get()};
      return connect_mesh(
          r, mesh->topology, endpoints, addresses, [&](int) { return options.accept_options; },
          test_mesh_key(), 30'000'000'000);
    }));
  }
  for (int r = 0; r < n; ++r) {
    auto channels = futures[r].get();
    if (!channels) {
      ADD_FAILURE() << "rank " << r << ": " << channels.error().message;
      return nullptr;
    }
    std::vector<std::string> names(n);
    for (int p = 0; p < n; ++p) {
      names[p] = "rank " + std::to_string(p) + " (site " +
                 mesh->topology.site_name(mesh->topology.site_of(p)) + ")";
    }
    mesh->peers.push_back(std::make_unique<Peers>(r, std::move(*channels), names));
  }
  return mesh;
}

// n ranks in one site "s" each, or `sites` sites of n/sites ranks ("a", "b", ...).
inline std::vector<std::string> site_layout(int n, int sites = 1) {
  std::vector<std::string> out(n);
  const int per_site = (n + sites - 1) / sites;
  for (int r = 0; r < n; ++r) out[r] = std::string(1, static_cast<char>('a' + r / per_site));
  return out;
}

// A deadline far enough away to be a hang guard only (never a timing assertion).
inline Deadline guard_deadline() {
  return Deadline{common::MonotonicClock().now_ns() + 60'000'000'000};
}

// Runs fn(rank) on every rank concurrently; returns the results in rank order.
inline std::vector<Result<void>> run_ranks(int n, const std::function<Result<void>(int)>& fn) {
  std::vector<std::future<Result<void>>> futures;
  for (int r = 0; r < n; ++r) futures.push_back(std::async(std::launch::async, fn, r));
  std::vector<Result<void>> results;
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

}  // namespace detwan::collectives::testing
