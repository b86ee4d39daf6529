// Inline progress (EndpointOptions::inline_progress): an endpoint without a progress thread,
// driven by its owner's calls to Endpoint::progress(). Over udp (127.0.0.1) and loopback (with
// and without injected faults): round trips where every callback runs on the owner's thread, a
// bulk message whose losses only the owner's timers can repair, a post from another thread that
// wakes the owner's wait, the owner rule, and the backends that refuse the mode.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/transport/security_util.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace detwan::transport {
namespace {

// Hang guard only: a broken loop fails the test instead of blocking it; never a timing check.
constexpr int64_t kGuardNs = 60'000'000'000;

struct InlineCase {
  std::string label;
  std::string backend;
  std::string listen;
  std::string config;
};

std::vector<std::byte> pattern(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::byte> bytes(size);
  for (auto& byte : bytes) byte = static_cast<std::byte>(random());
  return bytes;
}

// Runs `endpoint`'s loop on this thread until `done` holds or the guard expires.
bool progress_until(Endpoint& endpoint, const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kGuardNs);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    Result<size_t> ran = endpoint.progress(100'000'000);
    if (!ran) {
      ADD_FAILURE() << ran.error().message;
      return false;
    }
  }
  return true;
}

// The server side on its own thread, which owns its endpoint: listens, accepts one channel and
// echoes every message back (each reply posted from the receive callback) until destroyed;
// `count` is how many it expects, after which it only keeps its loop running.
class EchoServer {
 public:
  EchoServer(const InlineCase& param, int count) : count_(count) {
    EndpointOptions options;
    options.security = testing::test_security();
    options.inline_progress = true;
    options.backend_config = param.config;
    thread_ = std::thread([this, param, options] { run(param, options); });
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return address_.has_value(); });
  }
  ~EchoServer() {
    stop_ = true;
    thread_.join();
  }
  [[nodiscard]] const std::string& address() const { return *address_; }
  [[nodiscard]] int echoed() const { return echoed_.load(); }
  [[nodiscard]] bool all_callbacks_on_owner() const { return foreign_callbacks_.load() == 0; }

 private:
  void run(const InlineCase& param, const EndpointOptions& options) {
    auto endpoint = make_endpoint(param.backend, options);
    std::string bound;
    if (endpoint) {
      auto listened = (*endpoint)->listen(param.listen);
      bound = listened ? *listened : std::string();
      if (!listened) ADD_FAILURE() << listened.error().message;
    } else {
      ADD_FAILURE() << endpoint.error().message;
    }
    {
      std::lock_guard lock(mutex_);
      address_ = bound;
    }
    ready_.notify_all();
    if (bound.empty()) return;
    auto accepted = (*endpoint)->accept(kGuardNs);
    ASSERT_TRUE(accepted) << accepted.error().message;
    channel_ = std::move(*accepted);
    owner_ = std::this_thread::get_id();
    arm();
    while (!stop_ && echoed_.load() < count_) {
      ASSERT_TRUE((*endpoint)->progress(10'000'000));
    }
    // Keep answering ACKs until the client is done with us.
    while (!stop_) (void)(*endpoint)->progress(1'000'000);
    channel_.reset();
  }
  void arm() {
    channel_->recv_async([this](Result<std::vector<std::byte>> got) {
      if (std::this_thread::get_id() != owner_) ++foreign_callbacks_;
      if (!got) return;
      auto reply = std::make_shared<std::vector<std::byte>>(std::move(*got));
      channel_->send_async(*reply, [reply](Result<void>) {});
      ++echoed_;
      arm();
    });
  }

  int count_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::optional<std::string> address_;
  std::unique_ptr<Channel> channel_;
  std::thread::id owner_;
  std::atomic<bool> stop_{false};
  std::atomic<int> echoed_{0};
  std::atomic<int> foreign_callbacks_{0};
};

class InlineProgressTest : public ::testing::TestWithParam<InlineCase> {
 protected:
  void SetUp() override {
    const BackendInfo info = backend_info(GetParam().backend);
    if (!info.usable) GTEST_SKIP() << GetParam().backend << ": " << info.reason;
  }
  // An inline client endpoint and a channel to `server` (channel nullptr after a failure).
  std::pair<std::unique_ptr<Endpoint>, std::unique_ptr<Channel>> connect_to(
      const EchoServer& server) {
    auto endpoint = make_client();
    if (endpoint == nullptr) return {};
    auto channel = endpoint->connect(server.address(), ChannelOptions{}, kGuardNs);
    EXPECT_TRUE(channel) << channel.error().message;
    if (!channel) return {};
    return {std::move(endpoint), std::move(*channel)};
  }
  std::unique_ptr<Endpoint> make_client() {
    EndpointOptions options;
    options.security = testing::test_security();
    options.inline_progress = true;
    options.backend_config = GetParam().config;
    auto endpoint = make_endpoint(GetParam().backend, options);
    EXPECT_TRUE(endpoint) << endpoint.error().message;
    return endpoint ? std::move(*endpoint) : nullptr;
  }
};

TEST_P(InlineProgressTest, RoundTripsRunEveryCallbackOnTheOwnersThread) {
  constexpr int kRounds = 200;
  EchoServer server(GetParam(), kRounds);
  auto [endpoint, channel] = connect_to(server);
  ASSERT_NE(channel, nullptr);
  const std::thread::id self = std::this_thread::get_id();
  int foreign = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<std::byte> request = pattern(64 + round, round);
    std::optional<Result<std::vector<std::byte>>> reply;
    std::optional<Result<void>> sent;
    channel->recv_async([&](Result<std::vector<std::byte>> got) {
      foreign += std::this_thread::get_id() != self;
      reply = std::move(got);
    });
    channel->send_async(request, [&](Result<void> result) {
      foreign += std::this_thread::get_id() != self;
      sent = std::move(result);
    });
    ASSERT_TRUE(progress_until(*endpoint, [&] { return reply && sent; })) << "round " << round;
    ASSERT_TRUE(*sent) << sent->error().message;
    ASSERT_TRUE(*reply) << reply->error().message;
    ASSERT_TRUE(**reply == request) << "round " << round << ": reply differs";
  }
  EXPECT_EQ(foreign, 0) << "callbacks ran on a thread other than the owner";
  EXPECT_EQ(server.echoed(), kRounds);
  EXPECT_TRUE(server.all_callbacks_on_owner());
  const ChannelStats stats = channel->stats();
  EXPECT_EQ(stats.messages_sent, static_cast<uint64_t>(kRounds));
  EXPECT_EQ(stats.messages_received, static_cast<uint64_t>(kRounds));
}

TEST_P(InlineProgressTest, BulkMessageCompletesByteExactOnTheOwnersTimers) {
  EchoServer server(GetParam(), 1);
  auto [endpoint, channel] = connect_to(server);
  ASSERT_NE(channel, nullptr);
  const std::vector<std::byte> message = pattern(2 << 20, 7);
  std::optional<Result<std::vector<std::byte>>> reply;
  channel->recv_async([&](Result<std::vector<std::byte>> got) { reply = std::move(got); });
  channel->send_async(message, [](Result<void>) {});
  ASSERT_TRUE(progress_until(*endpoint, [&] { return reply.has_value(); }));
  ASSERT_TRUE(*reply) << reply->error().message;
  EXPECT_TRUE(**reply == message) << "2 MiB echo differs";
  if (GetParam().config.find("loss") != std::string::npos) {
    // Only the owner's progress() calls ran the retransmission timers and the pacer.
    EXPECT_GT(channel->stats().segments_retransmitted, 0u);
  }
}

TEST_P(InlineProgressTest, APostFromAnotherThreadWakesTheOwnersWait) {
  EchoServer server(GetParam(), 1);
  auto [endpoint, channel] = connect_to(server);
  ASSERT_NE(channel, nullptr);
  const std::vector<std::byte> request = pattern(100, 1);
  std::atomic<bool> replied{false};
  channel->recv_async([&](Result<std::vector<std::byte>> got) {
    EXPECT_TRUE(got && *got == request);
    replied = true;
  });
  // The owner waits in progress() with a long timeout; the request is posted meanwhile by
  // another thread, whose post must interrupt the wait (or the exchange takes the guard).
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    channel->send_async(request, [](Result<void>) {});
  });
  ASSERT_TRUE(progress_until(*endpoint, [&] { return replied.load(); }));
  poster.join();
}

TEST_P(InlineProgressTest, OnlyTheOwnerMayDriveTheEndpoint) {
  auto endpoint = make_client();
  ASSERT_NE(endpoint, nullptr);
  Result<size_t> first = endpoint->progress(0);  // this thread becomes the owner
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(*first, 0u);  // nothing to do, and no wait
  std::optional<Result<size_t>> other;
  std::optional<Result<std::unique_ptr<Channel>>> connected;
  std::thread intruder([&] {
    other = endpoint->progress(0);
    connected = endpoint->connect("127.0.0.1:9", ChannelOptions{}, 1'000'000);
  });
  intruder.join();
  ASSERT_FALSE(*other);
  EXPECT_EQ(other->error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(other->error().message.find("thread"), std::string::npos) << other->error().message;
  ASSERT_FALSE(*connected);
  EXPECT_EQ(connected->error().code, ErrorCode::kInvalidArgument);
}

TEST_P(InlineProgressTest, ACallbackMayNotReenterTheLoop) {
  EchoServer server(GetParam(), 1);
  auto [endpoint, channel] = connect_to(server);
  ASSERT_NE(channel, nullptr);
  std::optional<Result<size_t>> nested;
  std::optional<Result<std::unique_ptr<Channel>>> nested_connect;
  bool replied = false;
  channel->recv_async([&](Result<std::vector<std::byte>> got) {
    EXPECT_TRUE(got);
    nested = endpoint->progress(0);
    nested_connect = endpoint->connect(server.address(), ChannelOptions{}, 1'000'000);
    replied = true;
  });
  const std::vector<std::byte> request = pattern(10, 2);
  channel->send_async(request, [](Result<void>) {});
  ASSERT_TRUE(progress_until(*endpoint, [&] { return replied; }));
  ASSERT_FALSE(*nested);
  EXPECT_EQ(nested->error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(nested->error().message.find("callback"), std::string::npos) << nested->error().message;
  ASSERT_FALSE(*nested_connect);
  EXPECT_EQ(nested_connect->error().code, ErrorCode::kInvalidArgument);
  // The loop is intact afterwards: another round trip completes.
  std::optional<Result<std::vector<std::byte>>> again;
  channel->recv_async([&](Result<std::vector<std::byte>> got) { again = std::move(got); });
  channel->send_async(request, [](Result<void>) {});
  ASSERT_TRUE(progress_until(*endpoint, [&] { return again.has_value(); }));
  ASSERT_TRUE(*again) << again->error().message;
  EXPECT_TRUE(**again == request);
}

TEST_P(InlineProgressTest, ClosingTheEndpointFailsPendingOperations) {
  EchoServer server(GetParam(), 0);
  auto [endpoint, channel] = connect_to(server);
  ASSERT_NE(channel, nullptr);
  std::optional<Result<std::vector<std::byte>>> pending;
  channel->recv_async([&](Result<std::vector<std::byte>> got) { pending = std::move(got); });
  ASSERT_TRUE(endpoint->progress(0));  // the receive is posted on the connection now
  endpoint.reset();                    // shuts down on this (the owner's) thread
  ASSERT_TRUE(pending.has_value());
  ASSERT_FALSE(*pending);
  EXPECT_EQ(pending->error().code, ErrorCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, InlineProgressTest,
    ::testing::Values(InlineCase{"udp", "udp", "127.0.0.1:0", ""},
                      InlineCase{"udp_busy_poll", "udp", "127.0.0.1:0", "busy_poll_us=auto"},
                      InlineCase{"loopback", "loopback", "inline-server", ""},
                      InlineCase{"loopback_faults", "loopback", "inline-faults",
                                 "loss=0.03,reorder=0.05,duplicate=0.01,seed=5"}),
    [](const ::testing::TestParamInfo<InlineCase>& info) { return info.param.label; });

TEST(InlineProgress, ProgressOnAThreadedEndpointNamesTheOption) {
  auto endpoint = make_endpoint("loopback", testing::keyed_options());
  ASSERT_TRUE(endpoint) << endpoint.error().message;
  Result<size_t> ran = (*endpoint)->progress(0);
  ASSERT_FALSE(ran);
  EXPECT_EQ(ran.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(ran.error().message.find("inline_progress"), std::string::npos) << ran.error().message;
}

TEST(InlineProgress, BackendsWithoutItRefuseTheOption) {
  EndpointOptions options;
  options.security = testing::test_security();
  options.inline_progress = true;
  for (const char* backend : {"tcp", "shm", "verbs"}) {
    if (!backend_info(backend).usable) continue;  // refused earlier, as unavailable
    auto endpoint = make_endpoint(backend, options);
    ASSERT_FALSE(endpoint) << backend;
    EXPECT_EQ(endpoint.error().code, ErrorCode::kInvalidArgument) << backend;
    EXPECT_NE(endpoint.error().message.find(backend), std::string::npos)
        << endpoint.error().message;
  }
}

}  // namespace
}  // namespace detwan::transport
