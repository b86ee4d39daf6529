#pragma once
// Helpers of the shm tests: future wrappers over the callbacks with a hang guard (a guard
// against a hang, not a timing assertion: 30 s on a noisy machine is still "never").
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "transport/transport.h"

namespace detwan::transport::shm::testing {

inline constexpr auto kHangGuard = std::chrono::seconds(30);
inline constexpr int64_t kSetupTimeoutNs = 10'000'000'000;  // connect/accept in a test

inline std::future<Result<void>> send_future(Channel& channel, std::span<const std::byte> message) {
  auto promise = std::make_shared<std::promise<Result<void>>>();
  auto future = promise->get_future();
  channel.send_async(message,
                     [promise](Result<void> result) { promise->set_value(std::move(result)); });
  return future;
}

inline std::future<Result<std::vector<std::byte>>> recv_future(Channel& channel) {
  auto promise = std::make_shared<std::promise<Result<std::vector<std::byte>>>>();
  auto future = promise->get_future();
  channel.recv_async(
      [promise](Result<std::vector<std::byte>> result) { promise->set_value(std::move(result)); });
  return future;
}

// Waits with the hang guard; a hang fails the test with a clear message.
template <typename T>
T await(std::future<T>& future) {
  if (future.wait_for(kHangGuard) != std::future_status::ready) {
    ADD_FAILURE() << "operation did not complete within the hang guard";
    std::abort();  // the callbacks still reference the test's buffers
  }
  return future.get();
}

inline std::vector<std::byte> random_bytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(size);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t word = rng();
    std::memcpy(out.data() + i, &word, 8);
  }
  for (; i < size; ++i) out[i] = static_cast<std::byte>(rng());
  return out;
}

}  // namespace detwan::transport::shm::testing
