// Channels over the loopback backend end to end: the datagram driver + the protocol + the fault
// fabric. Many messages byte-exact through loss, reordering and duplication; peer death; close;
// endpoint destruction; strict backend_config.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "tests/transport/security_util.h"
#include "tests/transport/datagram/channel_test_util.h"
#include "transport/datagram/driver.h"
#include "transport/loopback/endpoint.h"

namespace detwan::transport {
namespace {

using testing::connect_pair;
using testing::expect_transfer;
using testing::get;
using testing::random_bytes;

ChannelOptions fast_options() {
  ChannelOptions options;
  options.initial_rtt_ns = 10'000'000;
  options.min_rto_ns = 5'000'000;
  options.peer_timeout_ns = 5'000'000'000;
  return options;
}

EndpointOptions endpoint_options(const std::string& config, const ChannelOptions& accept) {
  EndpointOptions options;
  options.security = testing::test_security();
  options.backend_config = config;
  options.accept_options = accept;
  return options;
}

TEST(LoopbackChannel, EchoesMessagesOfEverySize) {
  auto pair = connect_pair(loopback::make_endpoint, "", endpoint_options("", fast_options()),
                           endpoint_options("", {}), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  EXPECT_NE(pair.client->describe().find(pair.address), std::string::npos);
  for (size_t size : {size_t{0}, size_t{1}, size_t{1471}, size_t{1472}, size_t{100'003},
                      size_t{3} << 20}) {
    const auto message = random_bytes(size, size);
    expect_transfer(*pair.client, *pair.server, message);
    expect_transfer(*pair.server, *pair.client, message);
  }
  const ChannelStats stats = pair.client->stats();
  EXPECT_GE(stats.messages_sent, 6u);
}

TEST(LoopbackChannel, LossReorderDuplicationDeliverManyMessagesByteExact) {
  constexpr int kMessages = 300;
  const std::string faults = "loss=0.02,reorder=0.05,duplicate=0.01,delay=1ms,jitter=200us";
  auto pair = connect_pair(loopback::make_endpoint, "", endpoint_options(faults + ",seed=1", fast_options()),
                           endpoint_options(faults + ",seed=2", {}), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  std::mt19937 random(42);
  std::vector<std::vector<std::byte>> messages;
  for (int i = 0; i < kMessages; ++i) {
    messages.push_back(random_bytes(std::uniform_int_distribution<size_t>(0, 30'000)(random), i));
  }
  ASSERT_NO_FATAL_FAILURE(testing::transfer_all(*pair.client, *pair.server, messages));
  const ChannelStats client = pair.client->stats();
  EXPECT_GT(client.segments_retransmitted + client.fec_recovered, 0u);  // losses were repaired
}

TEST(LoopbackChannel, MessagesArrivingBeforeRecvAreBufferedInOrder) {
  auto pair = connect_pair(loopback::make_endpoint, "", endpoint_options("", fast_options()),
                           endpoint_options("", {}), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  std::vector<std::vector<std::byte>> messages;
  for (int i = 0; i < 20; ++i) messages.push_back(random_bytes(10 + i * 100, 100 + i));
  std::vector<std::future<Result<void>>> sent;
  for (const auto& message : messages) sent.push_back(testing::send(*pair.client, message));
  for (auto& future : sent) ASSERT_TRUE(get(future));  // all delivered, none received yet
  // Receives posted from inside completion callbacks (on the progress thread) chain in order.
  std::promise<std::vector<std::vector<std::byte>>> done;
  auto all = std::make_shared<std::vector<std::vector<std::byte>>>();
  std::function<void(Result<std::vector<std::byte>>)> next;
  next = [&](Result<std::vector<std::byte>> got) {
    all->push_back(got ? std::move(*got) : std::vector<std::byte>{});
    if (all->size() == messages.size()) {
      done.set_value(*all);
    } else {
      pair.server->recv_async(next);
    }
  };
  pair.server->recv_async(next);
  auto future = done.get_future();
  EXPECT_EQ(get(future), messages);
}

TEST(LoopbackChannel, PeerDeathFailsPendingSendWithTimeout) {
  ChannelOptions options = fast_options();
  options.peer_timeout_ns = 300'000'000;
  options.keepalive_interval_ns = 50'000'000;
  auto pair = connect_pair(loopback::make_endpoint, "", endpoint_options("", options),
                           endpoint_options("", {}), options);
  ASSERT_TRUE(pair.client && pair.server);
  expect_transfer(*pair.client, *pair.server, random_bytes(1000, 1));
  ASSERT_TRUE(loopback::kill_endpoint(pair.address));
  const auto message = random_bytes(200'000, 2);
  auto received = testing::recv(*pair.client);
  auto sent = testing::send(*pair.client, message);
  Result<void> result = get(sent);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kTimeout) << result.error().message;
  Result<std::vector<std::byte>> pending = get(received);
  ASSERT_FALSE(pending);
  EXPECT_EQ(pending.error().code, ErrorCode::kTimeout);
  auto later = testing::send(*pair.client, message);  // every later operation: the same error
  Result<void> later_result = get(later);
  ASSERT_FALSE(later_result);
  EXPECT_EQ(later_result.error().code, ErrorCode::kTimeout);
}

TEST(LoopbackChannel, CloseFailsPendingOperationsAndThePeerSeesIt) {
  auto pair = connect_pair(loopback::make_endpoint, "", endpoint_options("", fast_options()),
                           endpoint_options("", {}), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  expect_transfer(*pair.client, *pair.server, random_bytes(10, 1));
  auto client_recv = testing::recv(*pair.client);
  auto server_recv = testing::recv(*pair.server);
  pair.client->close();
  Result<std::vector<std::byte>> local = get(client_recv);
  ASSERT_FALSE(local);
  EXPECT_EQ(local.error().code, ErrorCode::kUnavailable);
  Result<std::vector<std::byte>> remote = get(server_recv);
  ASSERT_FALSE(remote);
  EXPECT_EQ(remote.error().code, ErrorCode::kUnavailable) << remote.error().message;
  const auto message = random_bytes(10, 2);
  auto after = testing::send(*pair.client, message);
  EXPECT_FALSE(get(after));
}

TEST(LoopbackChannel, EndpointDestructionFailsPendingOperations) {
  auto pair = connect_pair(loopback::make_endpoint, "", endpoint_options("", fast_options()),
                           endpoint_options("", {}), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  auto pending = testing::recv(*pair.client);
  pair.client_endpoint.reset();
  Result<std::vector<std::byte>> result = get(pending);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kUnavailable);
  const auto message = random_bytes(10, 3);
  auto after = testing::send(*pair.client, message);  // no progress thread left: completes at once
  Result<void> after_result = get(after);
  ASSERT_FALSE(after_result);
  EXPECT_EQ(after_result.error().code, ErrorCode::kUnavailable);
}

TEST(LoopbackChannel, TwoPathsDeliverByteExact) {
  ChannelOptions options = fast_options();
  options.paths.resize(2);
  options.paths[0].rate_bps = 200'000'000;
  options.paths[1].rate_bps = 100'000'000;
  auto pair = connect_pair(loopback::make_endpoint, "", endpoint_options("", fast_options()),
                           endpoint_options("", {}), options);
  ASSERT_TRUE(pair.client && pair.server);
  EXPECT_NE(pair.client->describe().find("2 paths"), std::string::npos);
  expect_transfer(*pair.client, *pair.server, random_bytes(1 << 20, 7));
  expect_transfer(*pair.server, *pair.client, random_bytes(12345, 8));
}

// A received buffer handed back with recycle() holds a later message that fits it: the same
// memory, every byte the new message's (segments arrive out of order and duplicated into a
// buffer still holding the previous message's bytes, which are not zero-filled first), counted
// in recv_buffers_reused; a larger message gets a buffer of its own.
TEST(LoopbackChannel, RecycledBufferHoldsTheNextMessageByteExact) {
  const std::string faults = "loss=0.02,reorder=0.1,duplicate=0.02";
  auto pair = connect_pair(loopback::make_endpoint, "",
                           endpoint_options(faults + ",seed=5", fast_options()),
                           endpoint_options(faults + ",seed=6", {}), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  const auto first = random_bytes(size_t{3} << 20, 21);
  auto received = testing::recv(*pair.server);
  auto sent_first = testing::send(*pair.client, first);
  ASSERT_TRUE(get(sent_first));
  auto got = get(received);
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_TRUE(*got == first);
  const std::byte* memory = got->data();
  pair.server->recycle(std::move(*got));

  const auto second = random_bytes((size_t{2} << 20) + 12'345, 22);
  received = testing::recv(*pair.server);
  auto sent_second = testing::send(*pair.client, second);
  ASSERT_TRUE(get(sent_second));
  got = get(received);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->data(), memory);
  ASSERT_EQ(got->size(), second.size());
  EXPECT_TRUE(*got == second) << "the recycled buffer holds the wrong bytes";
  EXPECT_EQ(pair.server->stats().recv_buffers_reused, 1u);
  pair.server->recycle(std::move(*got));

  const auto third = random_bytes(size_t{5} << 20, 23);  // larger than the kept buffer
  received = testing::recv(*pair.server);
  auto sent_third = testing::send(*pair.client, third);
  ASSERT_TRUE(get(sent_third));
  got = get(received);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_TRUE(*got == third);
  EXPECT_EQ(pair.server->stats().recv_buffers_reused, 1u);
}

TEST(LoopbackBackend, ConnectErrorsNameTheProblem) {
  auto endpoint = loopback::make_endpoint(testing::keyed_options());
  ASSERT_TRUE(endpoint);
  auto missing = (*endpoint)->connect("nobody-here", fast_options(), 1'000'000'000);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("nobody-here"), std::string::npos);
  // A listener that never answers: connect() gives up after its timeout.
  auto silent = loopback::make_endpoint(testing::keyed_options());
  ASSERT_TRUE(silent);
  auto name = (*silent)->listen("");
  ASSERT_TRUE(name);
  ASSERT_TRUE(loopback::partition(*name));
  auto timed_out = (*endpoint)->connect(*name, fast_options(), 200'000'000);
  ASSERT_FALSE(timed_out);
  EXPECT_EQ(timed_out.error().code, ErrorCode::kTimeout);
  auto no_accept = (*endpoint)->accept(1'000'000);
  ASSERT_FALSE(no_accept);
  EXPECT_EQ(no_accept.error().code, ErrorCode::kInvalidArgument);  // not listening
}

TEST(LoopbackBackend, StrictConfigAndInfo) {
  EXPECT_TRUE(loopback::backend_info().usable);
  EndpointOptions options;
  options.security = testing::test_security();
  options.backend_config = "loss=0.1,bogus=2";
  auto endpoint = loopback::make_endpoint(options);
  ASSERT_FALSE(endpoint);
  EXPECT_EQ(endpoint.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(endpoint.error().message.find("bogus"), std::string::npos);
}

}  // namespace
}  // namespace detwan::transport
