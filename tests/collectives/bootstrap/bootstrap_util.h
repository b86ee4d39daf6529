#pragma once
// Helpers for the bootstrap tests: per-rank blobs (including empty and largest ones) and running
// every rank's join + exchange on its own thread.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_codec.h"

namespace detwan::collectives::testing {

// Rank 0: empty; rank 1: the largest blob allowed, of seeded random bytes; others: a short
// distinct text.
inline std::string blob_for_rank(int rank) {
  if (rank == 0) return "";
  if (rank == 1) {
    std::mt19937 random(12345);
    std::string blob(bootstrap::kMaxBlobBytes, '\0');
    for (char& c : blob) c = static_cast<char>(random());
    return blob;
  }
  return "site=s" + std::to_string(rank % 3) + ";addr=10.0.0." + std::to_string(rank) + ":7000";
}

inline std::vector<std::string> expected_blobs(int nranks) {
  std::vector<std::string> blobs;
  for (int rank = 0; rank < nranks; ++rank) blobs.push_back(blob_for_rank(rank));
  return blobs;
}

// Runs body(rank) for every rank on its own thread, returns each rank's result.
template <typename T>
std::vector<T> on_threads(int nranks, const std::function<T(int)>& body) {
  std::vector<T> results(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < nranks; ++rank) {
    threads.emplace_back([&, rank] { results[rank] = body(rank); });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

// join_bootstrap + exchange(blob_for_rank(rank)), as one result.
inline Result<std::vector<std::string>> join_and_exchange(const std::string& spec, int rank,
                                                          int nranks, int64_t timeout_ns,
                                                          std::string* local_host = nullptr) {
  auto bootstrap = join_bootstrap(spec, rank, nranks, timeout_ns);
  if (!bootstrap) return std::unexpected(bootstrap.error());
  if (local_host != nullptr) *local_host = (*bootstrap)->local_host();
  return (*bootstrap)->exchange(blob_for_rank(rank), timeout_ns);
}

inline constexpr int64_t kSecondNs = 1'000'000'000;

}  // namespace detwan::collectives::testing
