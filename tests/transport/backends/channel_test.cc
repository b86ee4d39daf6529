// One parameterised suite over every transport backend (the same contract, transport.h).
// Backends that are not usable here (not compiled, no device) are skipped with
// the registry's reason. "loopback_faults" runs the loopback backend with injected loss,
// reordering and duplication.
//
// No timing assertions: every wait has a generous 30 s guard that only catches hangs.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/registry.h"
#include "tests/transport/security_util.h"
#include "transport/transport.h"

namespace detwan::transport {
namespace {

constexpr auto kHangGuard = std::chrono::seconds(30);
constexpr int64_t kSetupTimeoutNs = 10'000'000'000;

struct BackendCase {
  std::string label;    // test name suffix
  std::string backend;  // registry name
  std::string address;  // listen address
  std::string config;   // EndpointOptions.backend_config
  // EndpointOptions.security: the test key in this mode (kNone: the plain protocol).
  SecurityMode mode = SecurityMode::kAuthenticate;
};

// Readable parameter in failure messages (instead of gtest's byte dump).
void PrintTo(const BackendCase& param, std::ostream* out) { *out << param.label; }

std::string address_for(const std::string& backend) {
  if (backend == "udp" || backend == "tcp" || backend == "verbs") return "127.0.0.1:0";
  return "";  // loopback, shm: the endpoint picks a name
}

BackendCase plain(const std::string& backend) {
  return {backend, backend, address_for(backend), ""};
}

BackendCase with_mode(const std::string& backend, SecurityMode mode) {
  return {backend + "_" + std::string(to_string(mode)), backend, address_for(backend), "", mode};
}

std::vector<std::byte> random_bytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(size);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t word = rng();
    for (size_t b = 0; b < 8; ++b) out[i + b] = static_cast<std::byte>(word >> (8 * b));
  }
  for (; i < size; ++i) out[i] = static_cast<std::byte>(rng());
  return out;
}

// Waits for a future with the hang guard; nullopt (and a recorded failure) if it never came.
template <typename T>
std::optional<T> await(std::future<T> future, const std::string& what) {
  if (future.wait_for(kHangGuard) != std::future_status::ready) {
    ADD_FAILURE() << what << ": no completion within the 30 s hang guard";
    return std::nullopt;
  }
  return future.get();
}

class ChannelTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    const BackendCase& param = GetParam();
    const BackendInfo info = backend_info(param.backend);
    if (!info.usable) GTEST_SKIP() << param.backend << ": " << info.reason;

    EndpointOptions options;
    options.backend_config = param.config;
    options.security = testing::test_security(param.mode);
    auto server = make_endpoint(param.backend, options);
    ASSERT_TRUE(server) << server.error().describe();
    server_endpoint_ = std::move(*server);
    auto client = make_endpoint(param.backend, options);
    ASSERT_TRUE(client) << client.error().describe();
    client_endpoint_ = std::move(*client);

    auto address = server_endpoint_->listen(param.address);
    ASSERT_TRUE(address) << address.error().describe();
    address_ = *address;

    auto connecting = std::async(std::launch::async, [&] {
      return client_endpoint_->connect(address_, ChannelOptions{}, kSetupTimeoutNs);
    });
    auto accepted = server_endpoint_->accept(kSetupTimeoutNs);
    auto connected = connecting.get();
    ASSERT_TRUE(connected) << connected.error().describe();
    ASSERT_TRUE(accepted) << accepted.error().describe();
    client_ = std::move(*connected);
    server_ = std::move(*accepted);
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
    client_endpoint_.reset();
    server_endpoint_.reset();
  }

  // Sends `message` on `from`, receives it on `to`; the received bytes (or nullopt on failure).
  std::optional<std::vector<std::byte>> transfer(Channel& from, Channel& to,
                                                 const std::vector<std::byte>& message) {
    auto sent = from.send(message);
    auto received = await(to.recv(), "recv");
    auto send_result = await(std::move(sent), "send");
    if (!received || !send_result) return std::nullopt;
    EXPECT_TRUE(*send_result) << send_result->error().describe();
    EXPECT_TRUE(*received) << received->error().describe();
    if (!*received) return std::nullopt;
    return std::move(**received);
  }

  std::unique_ptr<Endpoint> server_endpoint_;
  std::unique_ptr<Endpoint> client_endpoint_;
  std::string address_;
  std::unique_ptr<Channel> client_;
  std::unique_ptr<Channel> server_;
};

TEST_P(ChannelTest, ConnectAndAccept) {
  ASSERT_NE(client_, nullptr);
  ASSERT_NE(server_, nullptr);
  EXPECT_EQ(client_endpoint_->backend_name(), GetParam().backend);
  EXPECT_FALSE(client_->describe().empty());
  EXPECT_FALSE(server_->describe().empty());
}

TEST_P(ChannelTest, EchoesMessagesOfEverySizeByteExact) {
  const std::vector<size_t> sizes{0, 1, 1471, 1472, 1473, (size_t{1} << 20) + 7, size_t{32} << 20};
  uint64_t seed = 100;
  for (const size_t size : sizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    const auto message = random_bytes(size, ++seed);
    auto there = transfer(*client_, *server_, message);
    ASSERT_TRUE(there);
    ASSERT_EQ(there->size(), size);
    ASSERT_TRUE(*there == message) << "content differs on the way there";
    auto back = transfer(*server_, *client_, *there);
    ASSERT_TRUE(back);
    ASSERT_TRUE(*back == message) << "content differs on the way back";
  }
}

TEST_P(ChannelTest, DeliversManySmallMessagesInOrder) {
  constexpr int kCount = 200;
  std::vector<std::vector<std::byte>> messages;
  for (int i = 0; i < kCount; ++i) messages.push_back(random_bytes(1 + (i * 37) % 300, 1000 + i));
  std::vector<std::future<Result<void>>> sends;
  for (const auto& message : messages) sends.push_back(client_->send(message));
  std::vector<std::future<Result<std::vector<std::byte>>>> recvs;
  for (int i = 0; i < kCount; ++i) recvs.push_back(server_->recv());
  for (int i = 0; i < kCount; ++i) {
    auto received = await(std::move(recvs[i]), "recv " + std::to_string(i));
    ASSERT_TRUE(received);
    ASSERT_TRUE(*received) << received->error().describe();
    ASSERT_TRUE(**received == messages[i]) << "message " << i << " out of order or corrupt";
  }
  for (auto& sent : sends) {
    auto result = await(std::move(sent), "send");
    ASSERT_TRUE(result && *result);
  }
}

TEST_P(ChannelTest, CarriesBothDirectionsAtOnce) {
  constexpr int kCount = 20;
  std::vector<std::vector<std::byte>> up, down;
  for (int i = 0; i < kCount; ++i) {
    up.push_back(random_bytes(64 * 1024 + i, 2000 + i));
    down.push_back(random_bytes(48 * 1024 + i, 3000 + i));
  }
  std::vector<std::future<Result<void>>> sends;
  std::vector<std::future<Result<std::vector<std::byte>>>> at_server, at_client;
  for (int i = 0; i < kCount; ++i) {
    sends.push_back(client_->send(up[i]));
    sends.push_back(server_->send(down[i]));
    at_server.push_back(server_->recv());
    at_client.push_back(client_->recv());
  }
  for (int i = 0; i < kCount; ++i) {
    auto got_up = await(std::move(at_server[i]), "recv at server");
    auto got_down = await(std::move(at_client[i]), "recv at client");
    ASSERT_TRUE(got_up && *got_up && **got_up == up[i]) << "upstream message " << i;
    ASSERT_TRUE(got_down && *got_down && **got_down == down[i]) << "downstream message " << i;
  }
  for (auto& sent : sends) {
    auto result = await(std::move(sent), "send");
    ASSERT_TRUE(result && *result);
  }
}

TEST_P(ChannelTest, CallbackApiDeliversOnProgressThread) {
  const auto message = random_bytes(5000, 7);
  std::promise<std::thread::id> recv_thread;
  std::promise<Result<std::vector<std::byte>>> received;
  server_->recv_async([&](Result<std::vector<std::byte>> result) {
    recv_thread.set_value(std::this_thread::get_id());
    received.set_value(std::move(result));
  });
  std::promise<Result<void>> sent;
  client_->send_async(message, [&](Result<void> result) { sent.set_value(std::move(result)); });
  auto got = await(received.get_future(), "recv_async");
  ASSERT_TRUE(got && *got);
  EXPECT_TRUE(**got == message);
  auto id = await(recv_thread.get_future(), "recv thread");
  ASSERT_TRUE(id);
  EXPECT_NE(*id, std::this_thread::get_id()) << "callback ran on the caller's thread";
  auto send_result = await(sent.get_future(), "send_async");
  ASSERT_TRUE(send_result && *send_result);
}

TEST_P(ChannelTest, FutureApiSendAndRecv) {
  const auto message = random_bytes(10'000, 11);
  auto sent = client_->send(message);
  auto received = await(server_->recv(), "recv()");
  ASSERT_TRUE(received && *received);
  EXPECT_EQ(**received, message);
  auto result = await(std::move(sent), "send()");
  ASSERT_TRUE(result);
  EXPECT_TRUE(*result) << result->error().describe();
}

TEST_P(ChannelTest, RecvPostedBeforeArrival) {
  auto pending = server_->recv();
  const auto message = random_bytes(3000, 13);
  auto sent = client_->send(message);
  auto received = await(std::move(pending), "recv");
  ASSERT_TRUE(received && *received);
  EXPECT_EQ(**received, message);
  auto send_result = await(std::move(sent), "send");
  ASSERT_TRUE(send_result && *send_result);
}

TEST_P(ChannelTest, RecvPostedAfterArrival) {
  const auto first = random_bytes(3000, 17);
  const auto second = random_bytes(40, 19);
  // Both sends complete before anything is asked for: the messages wait in the receiver.
  auto sent_first = await(client_->send(first), "send first");
  auto sent_second = await(client_->send(second), "send second");
  ASSERT_TRUE(sent_first && *sent_first);
  ASSERT_TRUE(sent_second && *sent_second);
  auto got_first = await(server_->recv(), "recv first");
  auto got_second = await(server_->recv(), "recv second");
  ASSERT_TRUE(got_first && *got_first && got_second && *got_second);
  EXPECT_EQ(**got_first, first);
  EXPECT_EQ(**got_second, second);
}

TEST_P(ChannelTest, PeerCloseFailsPendingRecv) {
  auto pending = server_->recv();
  client_->close();
  auto result = await(std::move(pending), "pending recv after the peer closed");
  ASSERT_TRUE(result);
  ASSERT_FALSE(*result) << "a recv completed with data although the peer sent none";
  EXPECT_EQ(result->error().code, ErrorCode::kUnavailable) << result->error().describe();
}

TEST_P(ChannelTest, SendAfterCloseFails) {
  client_->close();
  const auto message = random_bytes(100, 23);
  auto result = await(client_->send(message), "send after close");
  ASSERT_TRUE(result);
  ASSERT_FALSE(*result) << "send succeeded on a closed channel";
  EXPECT_EQ(result->error().code, ErrorCode::kUnavailable) << result->error().describe();
  auto recv_result = await(client_->recv(), "recv after close");
  ASSERT_TRUE(recv_result);
  EXPECT_FALSE(*recv_result);
}

TEST_P(ChannelTest, ConnectWhereNobodyListensFails) {
  // An address that was just listened on and released: nobody is there now.
  std::string vacant;
  {
    EndpointOptions options;
    options.backend_config = GetParam().config;
    options.security = testing::test_security(GetParam().mode);
    auto gone = make_endpoint(GetParam().backend, options);
    ASSERT_TRUE(gone) << gone.error().describe();
    auto address = (*gone)->listen(GetParam().address);
    ASSERT_TRUE(address) << address.error().describe();
    vacant = *address;
  }
  ChannelOptions options;
  options.peer_timeout_ns = 2'000'000'000;
  auto connected = client_endpoint_->connect(vacant, options, 2'000'000'000);
  ASSERT_FALSE(connected) << "connected to " << vacant << " where nobody listens";
  EXPECT_FALSE(connected.error().message.empty());
}

TEST_P(ChannelTest, StatsCountMessagesAndBytes) {
  const std::vector<size_t> sizes{10, 2000, 70'000};
  uint64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto message = random_bytes(sizes[i], 50 + i);
    total += sizes[i];
    ASSERT_TRUE(transfer(*client_, *server_, message));
  }
  const ChannelStats sent = client_->stats();
  const ChannelStats received = server_->stats();
  EXPECT_EQ(sent.messages_sent, sizes.size());
  EXPECT_EQ(sent.bytes_sent, total);
  EXPECT_EQ(received.messages_received, sizes.size());
  EXPECT_EQ(received.bytes_received, total);
  EXPECT_EQ(sent.messages_received, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, ChannelTest,
    ::testing::Values(plain("udp"), plain("loopback"), plain("tcp"), plain("shm"), plain("verbs"),
                      BackendCase{"loopback_faults", "loopback", "",
                                  "loss=0.02,reorder=0.05,duplicate=0.01,seed=3"},
                      BackendCase{"udp_threads", "udp", "127.0.0.1:0", "threads=3"},
                      with_mode("udp", SecurityMode::kEncrypt),
                      with_mode("udp", SecurityMode::kNone),
                      with_mode("loopback", SecurityMode::kEncrypt),
                      with_mode("tcp", SecurityMode::kEncrypt),
                      with_mode("tcp", SecurityMode::kNone)),
    [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.label; });

}  // namespace
}  // namespace detwan::transport
