#pragma once
// Helpers shared by the end-to-end channel tests over the datagram backends.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace detwan::transport::testing {

// Hang guard only (a broken channel must fail the test, not block it): never a timing assertion.
inline constexpr auto kGuard = std::chrono::seconds(60);

inline std::vector<std::byte> random_bytes(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::byte> bytes(size);
  for (auto& byte : bytes) byte = static_cast<std::byte>(random());
  return bytes;
}

// Future-returning wrappers over the callbacks (the tests link only their backend, not the
// registry and Channel::send/recv of transport.cc).
inline std::future<Result<void>> send(Channel& channel, std::span<const std::byte> message) {
  auto promise = std::make_shared<std::promise<Result<void>>>();
  auto future = promise->get_future();
  channel.send_async(message, [promise](Result<void> result) { promise->set_value(std::move(result)); });
  return future;
}

inline std::future<Result<std::vector<std::byte>>> recv(Channel& channel) {
  auto promise = std::make_shared<std::promise<Result<std::vector<std::byte>>>>();
  auto future = promise->get_future();
  channel.recv_async([promise](Result<std::vector<std::byte>> result) {
    promise->set_value(std::move(result));
  });
  return future;
}

using MakeEndpoint = Result<std::unique_ptr<Endpoint>> (*)(const EndpointOptions&);

template <typename T>
T get(std::future<T>& future) {
  if (future.wait_for(kGuard) != std::future_status::ready) {
    ADD_FAILURE() << "operation did not complete within the hang guard";
    std::abort();  // the progress thread still holds the promise: nothing sane to continue with
  }
  return future.get();
}

struct ChannelPair {
  std::unique_ptr<Endpoint> server_endpoint;
  std::unique_ptr<Endpoint> client_endpoint;
  std::string address;
  std::unique_ptr<Channel> server;
  std::unique_ptr<Channel> client;
};

// A server endpoint listening on `listen_address`, a client endpoint connected to it, and the
// accepted channel. Fails the test (returns an empty pair) on any error.
inline ChannelPair connect_pair(MakeEndpoint make_endpoint, const std::string& listen_address,
                                const EndpointOptions& server_options,
                                const EndpointOptions& client_options,
                                const ChannelOptions& channel_options) {
  ChannelPair pair;
  auto server = make_endpoint(server_options);
  if (!server) {
    ADD_FAILURE() << server.error().message;
    return pair;
  }
  pair.server_endpoint = std::move(*server);
  auto address = pair.server_endpoint->listen(listen_address);
  if (!address) {
    ADD_FAILURE() << address.error().message;
    return pair;
  }
  pair.address = *address;
  auto client = make_endpoint(client_options);
  if (!client) {
    ADD_FAILURE() << client.error().message;
    return pair;
  }
  pair.client_endpoint = std::move(*client);
  auto channel = pair.client_endpoint->connect(pair.address, channel_options, 10'000'000'000);
  if (!channel) {
    ADD_FAILURE() << channel.error().message;
    return pair;
  }
  pair.client = std::move(*channel);
  auto accepted = pair.server_endpoint->accept(10'000'000'000);
  if (!accepted) {
    ADD_FAILURE() << accepted.error().message;
    return pair;
  }
  pair.server = std::move(*accepted);
  return pair;
}

// Sends `message` from `from`, receives it on `to`, and checks it byte for byte.
// Posts a receive per message, sends them all, and checks every send completes and every
// message arrives in order, byte-exact. Use under ASSERT_NO_FATAL_FAILURE.
inline void transfer_all(Channel& from, Channel& to,
                         const std::vector<std::vector<std::byte>>& messages) {
  std::vector<std::future<Result<std::vector<std::byte>>>> received;
  for (size_t i = 0; i < messages.size(); ++i) received.push_back(recv(to));
  std::vector<std::future<Result<void>>> sent;
  for (const auto& message : messages) sent.push_back(send(from, message));
  for (auto& future : sent) {
    Result<void> result = get(future);
    ASSERT_TRUE(result) << result.error().message;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    Result<std::vector<std::byte>> got = get(received[i]);
    ASSERT_TRUE(got) << got.error().message;
    ASSERT_TRUE(*got == messages[i]) << "message " << i << " differs";
  }
}

inline void expect_transfer(Channel& from, Channel& to, const std::vector<std::byte>& message) {
  auto received = recv(to);
  auto sent = send(from, message);
  Result<void> send_result = get(sent);
  ASSERT_TRUE(send_result) << send_result.error().message;
  Result<std::vector<std::byte>> got = get(received);
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_EQ(got->size(), message.size());
  EXPECT_TRUE(*got == message) << "payload differs (" << message.size() << " bytes)";
}

}  // namespace detwan::transport::testing
