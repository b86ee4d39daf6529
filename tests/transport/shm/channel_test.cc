// Channels between two shm endpoints of this process (client and server on their own progress
// threads): the transport.h contract end to end.
#include <atomic>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "tests/transport/shm/test_util.h"
#include "transport/shm/endpoint.h"

namespace detwan::transport::shm {
namespace {

using testing::await;
using testing::kSetupTimeoutNs;
using testing::random_bytes;
using testing::recv_future;
using testing::send_future;


struct Pair {
  std::unique_ptr<Endpoint> server_endpoint;
  std::unique_ptr<Endpoint> client_endpoint;
  std::unique_ptr<Channel> client;
  std::unique_ptr<Channel> server;
};

Pair make_pair(const std::string& config = "", ChannelOptions client_options = {},
               ChannelOptions server_options = {}) {
  Pair pair;
  EndpointOptions server_config;
  server_config.accept_options = server_options;
  auto server_endpoint = make_endpoint(server_config);
  EXPECT_TRUE(server_endpoint) << server_endpoint.error().describe();
  EndpointOptions client_config;
  client_config.backend_config = config;
  auto client_endpoint = make_endpoint(client_config);
  EXPECT_TRUE(client_endpoint) << client_endpoint.error().describe();
  pair.server_endpoint = std::move(*server_endpoint);
  pair.client_endpoint = std::move(*client_endpoint);
  auto name = pair.server_endpoint->listen("");
  EXPECT_TRUE(name) << name.error().describe();
  // connect() does not wait for accept(): the rings are usable at once.
  auto client = pair.client_endpoint->connect(*name, client_options, kSetupTimeoutNs);
  EXPECT_TRUE(client) << client.error().describe();
  auto server = pair.server_endpoint->accept(kSetupTimeoutNs);
  EXPECT_TRUE(server) << server.error().describe();
  pair.client = std::move(*client);
  pair.server = std::move(*server);
  return pair;
}

void expect_echo(Channel& from, Channel& to, const std::vector<std::byte>& message) {
  auto received = recv_future(to);
  auto sent = send_future(from, message);
  auto send_result = await(sent);
  ASSERT_TRUE(send_result) << send_result.error().describe();
  auto recv_result = await(received);
  ASSERT_TRUE(recv_result) << recv_result.error().describe();
  ASSERT_EQ(recv_result->size(), message.size());
  EXPECT_TRUE(*recv_result == message) << "bytes differ, size " << message.size();
}

TEST(ShmEndpoint, BackendInfoAndNames) {
  const BackendInfo info = backend_info();
  EXPECT_EQ(info.name, "shm");
  EXPECT_TRUE(info.usable);
  auto endpoint = make_endpoint({});
  ASSERT_TRUE(endpoint);
  EXPECT_EQ((*endpoint)->backend_name(), "shm");
  auto name = (*endpoint)->listen("");
  ASSERT_TRUE(name);
  EXPECT_FALSE(name->empty());
  auto again = (*endpoint)->listen("");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidArgument);
  // The same explicit name twice is refused by the kernel.
  auto other = make_endpoint({});
  ASSERT_TRUE(other);
  auto clash = (*other)->listen(*name);
  ASSERT_FALSE(clash);
  EXPECT_EQ(clash.error().code, ErrorCode::kAlreadyExists);
}

TEST(ShmEndpoint, SetupErrorsNameTheProblem) {
  auto endpoint = make_endpoint({});
  ASSERT_TRUE(endpoint);
  auto nobody = (*endpoint)->connect("nobody-listens-here-4711", {}, kSetupTimeoutNs);
  ASSERT_FALSE(nobody);
  EXPECT_EQ(nobody.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(nobody.error().message.find("nobody-listens-here-4711"), std::string::npos);
  auto bad_name = (*endpoint)->connect("a/b", {}, kSetupTimeoutNs);
  ASSERT_FALSE(bad_name);
  EXPECT_EQ(bad_name.error().code, ErrorCode::kInvalidArgument);
  auto no_listen = (*endpoint)->accept(0);
  ASSERT_FALSE(no_listen);
  EXPECT_EQ(no_listen.error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE((*endpoint)->listen(""));
  auto nobody_came = (*endpoint)->accept(1'000'000);
  ASSERT_FALSE(nobody_came);
  EXPECT_EQ(nobody_came.error().code, ErrorCode::kTimeout);

  EndpointOptions bad_config;
  bad_config.backend_config = "ring_bytes=8mb,colour=blue";
  auto bad = make_endpoint(bad_config);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("colour"), std::string::npos);
  bad_config.backend_config = "ring_bytes=3";
  EXPECT_FALSE(make_endpoint(bad_config));
  bad_config.backend_config = " ring_bytes = 64kb ";
  EXPECT_TRUE(make_endpoint(bad_config));
  EndpointOptions bad_options;
  bad_options.accept_options.peer_timeout_ns = 0;
  EXPECT_FALSE(make_endpoint(bad_options));
}

TEST(ShmChannel, EchoOddSizesThroughASmallRing) {
  Pair pair = make_pair("ring_bytes=1000");
  EXPECT_NE(pair.client->describe().find("shm"), std::string::npos);
  uint64_t seed = 1;
  for (size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{991}, size_t{992}, size_t{993},
                      size_t{1000}, size_t{1471}, size_t{4097}, size_t{100'003}}) {
    expect_echo(*pair.client, *pair.server, random_bytes(size, seed++));
    expect_echo(*pair.server, *pair.client, random_bytes(size, seed++));
  }
}

TEST(ShmChannel, LargeMessageStreamsThroughASmallerRing) {
  Pair pair = make_pair("ring_bytes=8mb");
  const std::vector<std::byte> message = random_bytes(size_t{64} << 20, 64);
  expect_echo(*pair.client, *pair.server, message);
  expect_echo(*pair.server, *pair.client, message);
  const ChannelStats stats = pair.client->stats();
  EXPECT_EQ(stats.messages_sent, 1u);
  EXPECT_EQ(stats.bytes_sent, message.size());
  EXPECT_EQ(stats.messages_received, 1u);
  EXPECT_EQ(stats.bytes_received, message.size());
}

// A received buffer handed back with recycle() holds the next message that fits it: the same
// memory, the new bytes, counted; a larger message gets a buffer of its own.
TEST(ShmChannel, RecycledBufferHoldsTheNextMessage) {
  Pair pair = make_pair("ring_bytes=1mb");
  const auto first = random_bytes(size_t{3} << 20, 11);
  auto received = recv_future(*pair.server);
  auto sent_first = send_future(*pair.client, first);
  ASSERT_TRUE(await(sent_first));
  auto got = await(received);
  ASSERT_TRUE(got) << got.error().describe();
  ASSERT_TRUE(*got == first);
  const std::byte* memory = got->data();
  pair.server->recycle(std::move(*got));

  const auto second = random_bytes(size_t{2} << 20, 12);
  received = recv_future(*pair.server);
  auto sent_second = send_future(*pair.client, second);
  ASSERT_TRUE(await(sent_second));
  got = await(received);
  ASSERT_TRUE(got) << got.error().describe();
  EXPECT_EQ(got->data(), memory);
  EXPECT_TRUE(*got == second) << "the recycled buffer holds the wrong bytes";
  EXPECT_EQ(pair.server->stats().recv_buffers_reused, 1u);
  pair.server->recycle(std::move(*got));

  const auto third = random_bytes(size_t{5} << 20, 13);  // larger than the kept buffer
  received = recv_future(*pair.server);
  auto sent_third = send_future(*pair.client, third);
  ASSERT_TRUE(await(sent_third));
  got = await(received);
  ASSERT_TRUE(got) << got.error().describe();
  EXPECT_TRUE(*got == third);
  EXPECT_EQ(pair.server->stats().recv_buffers_reused, 1u);
}

// Many messages of random sizes, all sends and receives posted up front: order and content.
TEST(ShmChannel, ManyMessagesInOrder) {
  Pair pair = make_pair("ring_bytes=4096");
  constexpr int kCount = 2000;
  std::mt19937_64 rng(7);
  std::vector<std::vector<std::byte>> messages;
  for (int i = 0; i < kCount; ++i) messages.push_back(random_bytes(rng() % 3000, 1000 + i));
  std::vector<std::future<Result<std::vector<std::byte>>>> receives;
  for (int i = 0; i < kCount / 2; ++i) receives.push_back(recv_future(*pair.server));
  std::vector<std::future<Result<void>>> sends;
  for (const auto& message : messages) sends.push_back(send_future(*pair.client, message));
  // Half of the receives posted after the sends: the ring holds the rest meanwhile.
  for (int i = kCount / 2; i < kCount; ++i) receives.push_back(recv_future(*pair.server));
  for (int i = 0; i < kCount; ++i) {
    auto received = await(receives[static_cast<size_t>(i)]);
    ASSERT_TRUE(received) << received.error().describe();
    ASSERT_TRUE(*received == messages[static_cast<size_t>(i)]) << "message " << i;
  }
  for (auto& send : sends) EXPECT_TRUE(await(send));
  EXPECT_EQ(pair.server->stats().messages_received, static_cast<uint64_t>(kCount));
}

// Both sides send and receive at once; receives are re-posted from the completion callback
// (which runs on the progress thread, not the test thread).
TEST(ShmChannel, BothDirectionsConcurrently) {
  Pair pair = make_pair("ring_bytes=65536");
  constexpr int kCount = 40;
  const auto message_for = [](int direction, int i) {
    return random_bytes(static_cast<size_t>(1 + (i * 37'813) % 300'000), direction * 1000 + i);
  };
  struct Receiver {
    std::mutex mutex;
    std::vector<std::vector<std::byte>> got;
    std::promise<void> done;
    std::atomic<bool> on_test_thread{false};
    std::thread::id test_thread = std::this_thread::get_id();
    Channel* channel = nullptr;
    int remaining = kCount;
    void post() {
      channel->recv_async([this](Result<std::vector<std::byte>> result) {
        if (std::this_thread::get_id() == test_thread) on_test_thread = true;
        std::lock_guard lock(mutex);
        got.push_back(result ? std::move(*result) : std::vector<std::byte>{std::byte{0xEE}});
        if (--remaining == 0) {
          done.set_value();
        } else {
          post();
        }
      });
    }
  };
  Receiver at_server;
  Receiver at_client;
  at_server.channel = pair.server.get();
  at_client.channel = pair.client.get();
  at_server.post();
  at_client.post();
  std::vector<std::vector<std::byte>> to_server;
  std::vector<std::vector<std::byte>> to_client;
  for (int i = 0; i < kCount; ++i) {
    to_server.push_back(message_for(1, i));
    to_client.push_back(message_for(2, i));
  }
  std::vector<std::future<Result<void>>> sends;
  std::thread other([&] {
    for (const auto& m : to_client) sends.push_back(send_future(*pair.server, m));
  });
  std::vector<std::future<Result<void>>> client_sends;
  for (const auto& m : to_server) client_sends.push_back(send_future(*pair.client, m));
  other.join();
  auto server_done = at_server.done.get_future();
  auto client_done = at_client.done.get_future();
  ASSERT_EQ(server_done.wait_for(testing::kHangGuard), std::future_status::ready);
  ASSERT_EQ(client_done.wait_for(testing::kHangGuard), std::future_status::ready);
  EXPECT_TRUE(at_server.got == to_server);
  EXPECT_TRUE(at_client.got == to_client);
  EXPECT_FALSE(at_server.on_test_thread);
  for (auto& send : sends) EXPECT_TRUE(await(send));
  for (auto& send : client_sends) EXPECT_TRUE(await(send));
}

// Messages completed before the peer closed are still delivered; the next receive fails.
TEST(ShmChannel, PeerCloseFailsPendingReceive) {
  Pair pair = make_pair();
  const auto message = random_bytes(5000, 9);
  auto sent = send_future(*pair.client, message);
  ASSERT_TRUE(await(sent));
  auto pending_at_client = recv_future(*pair.client);
  pair.client->close();
  auto closed_locally = await(pending_at_client);
  ASSERT_FALSE(closed_locally);
  EXPECT_EQ(closed_locally.error().code, ErrorCode::kUnavailable);
  auto first = recv_future(*pair.server);
  auto delivered = await(first);
  ASSERT_TRUE(delivered) << delivered.error().describe();
  EXPECT_TRUE(*delivered == message);
  auto second = recv_future(*pair.server);
  auto failed = await(second);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(failed.error().message, "shm peer closed");
  // Later operations complete with the same error.
  auto send_after = send_future(*pair.server, message);
  auto send_result = await(send_after);
  ASSERT_FALSE(send_result);
  EXPECT_EQ(send_result.error().message, "shm peer closed");
}

TEST(ShmChannel, PendingReceiveFailsWhenPeerEndpointIsDestroyed) {
  Pair pair = make_pair();
  auto pending = recv_future(*pair.server);
  pair.client.reset();
  pair.client_endpoint.reset();
  auto result = await(pending);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kUnavailable);
}

TEST(ShmChannel, LocalCloseFailsPendingAndLaterOperations) {
  Pair pair = make_pair("ring_bytes=4096");
  const auto big = random_bytes(100'000, 3);  // cannot fit: stays pending (nobody reads)
  auto pending_send = send_future(*pair.client, big);
  auto pending_recv = recv_future(*pair.client);
  pair.client->close();
  auto send_result = await(pending_send);
  auto recv_result = await(pending_recv);
  ASSERT_FALSE(send_result);
  ASSERT_FALSE(recv_result);
  EXPECT_EQ(send_result.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(recv_result.error().code, ErrorCode::kUnavailable);
  auto later = send_future(*pair.client, big);
  auto later_result = await(later);
  ASSERT_FALSE(later_result);
  EXPECT_EQ(later_result.error().message, send_result.error().message);
}

TEST(ShmChannel, EndpointDestroyedFailsEverythingAfterwardsToo) {
  Pair pair = make_pair();
  auto pending = recv_future(*pair.client);
  pair.client_endpoint.reset();
  auto result = await(pending);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kUnavailable);
  // No progress thread any more: completes at once with the same kind of error.
  auto later = recv_future(*pair.client);
  auto later_result = await(later);
  ASSERT_FALSE(later_result);
  EXPECT_EQ(later_result.error().code, ErrorCode::kUnavailable);
}

TEST(ShmChannel, MessageAboveMaxMessageBytesIsRefused) {
  ChannelOptions client_options;
  client_options.max_message_bytes = 1000;
  ChannelOptions server_options;
  server_options.max_message_bytes = 500;
  Pair pair = make_pair("", client_options, server_options);
  const auto too_big_here = random_bytes(1001, 1);
  auto refused = send_future(*pair.client, too_big_here);
  auto refused_result = await(refused);
  ASSERT_FALSE(refused_result);
  EXPECT_EQ(refused_result.error().code, ErrorCode::kInvalidArgument);
  // The server announced 500 at accept(): the client refuses 501 before it reaches the ring.
  const auto too_big_there = random_bytes(501, 2);
  auto refused_peer = send_future(*pair.client, too_big_there);
  auto refused_peer_result = await(refused_peer);
  ASSERT_FALSE(refused_peer_result);
  EXPECT_EQ(refused_peer_result.error().code, ErrorCode::kInvalidArgument);
  // The channel is still fine.
  expect_echo(*pair.client, *pair.server, random_bytes(500, 3));
  expect_echo(*pair.server, *pair.client, random_bytes(500, 4));
}

}  // namespace
}  // namespace detwan::transport::shm
