// Authenticated tcp channels (transport/tcp/sealed_handshake.h, wire.h "records"): a keyed
// pair carries messages byte-exact in both modes; another key cannot connect either way; a
// mode mismatch is a clear error; a record tampered with on the way (by a relay between the
// two) fails the channel with a clear error and delivers nothing of it.
#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/transport/security_util.h"
#include "transport/tcp/tcp_endpoint.h"
#include "transport/tcp/wire.h"

namespace detwan::transport::tcp {
namespace {

constexpr int64_t kTimeoutNs = 10'000'000'000;
constexpr auto kGuard = std::chrono::seconds(30);

EndpointOptions keyed(SecurityMode mode, uint8_t key_first = 0) {
  EndpointOptions options;
  options.security = Security::keyed(testing::test_key(key_first), mode, "tcp-test");
  return options;
}

std::vector<std::byte> random_message(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::byte> out(size);
  for (auto& b : out) b = static_cast<std::byte>(random());
  return out;
}

struct Pair {
  std::unique_ptr<TcpEndpoint> server;
  std::unique_ptr<TcpEndpoint> client;
  Result<std::unique_ptr<Channel>> to_server = common::make_error(ErrorCode::kInternal, "unset");
  Result<std::unique_ptr<Channel>> at_server = common::make_error(ErrorCode::kInternal, "unset");
};

// Connects `client_options` to a server of `server_options` (through `via` if given: the port
// of a relay in front of the server).
Pair connect(const EndpointOptions& server_options, const EndpointOptions& client_options,
             const std::function<std::string(const std::string&)>& via = nullptr,
             int64_t timeout_ns = kTimeoutNs) {
  Pair p;
  p.server = std::make_unique<TcpEndpoint>(server_options);
  p.client = std::make_unique<TcpEndpoint>(client_options);
  auto address = p.server->listen("127.0.0.1:0");
  if (!address) {
    p.to_server = std::unexpected(address.error());
    return p;
  }
  const std::string target = via ? via(*address) : *address;
  auto accepting = std::async(std::launch::async, [&] { return p.server->accept(timeout_ns); });
  p.to_server = p.client->connect(target, ChannelOptions{}, timeout_ns);
  p.at_server = accepting.get();
  return p;
}

template <typename T>
T await(std::future<T> future) {
  if (future.wait_for(kGuard) != std::future_status::ready) {
    ADD_FAILURE() << "no completion within the hang guard";
    std::abort();
  }
  return future.get();
}

TEST(TcpSealed, KeyedChannelsCarryMessagesByteExactInBothModes) {
  for (const SecurityMode mode : {SecurityMode::kAuthenticate, SecurityMode::kEncrypt}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    Pair p = connect(keyed(mode), keyed(mode));
    ASSERT_TRUE(p.to_server) << p.to_server.error().message;
    ASSERT_TRUE(p.at_server) << p.at_server.error().message;
    for (size_t size : {size_t{0}, size_t{1}, size_t{65'536}, size_t{65'537}, size_t{3} << 20}) {
      const auto message = random_message(size, size + 7);
      auto received = (*p.at_server)->recv();
      ASSERT_TRUE(await((*p.to_server)->send(message)));
      auto got = await(std::move(received));
      ASSERT_TRUE(got) << got.error().message;
      EXPECT_TRUE(*got == message) << size;
      auto back = (*p.to_server)->recv();
      ASSERT_TRUE(await((*p.at_server)->send(message)));
      auto got_back = await(std::move(back));
      ASSERT_TRUE(got_back);
      EXPECT_TRUE(*got_back == message);
    }
  }
}

TEST(TcpSealed, MissingKeyIsRefusedAtListenAndConnect) {
  TcpEndpoint endpoint(EndpointOptions{});
  auto listened = endpoint.listen("127.0.0.1:0");
  ASSERT_FALSE(listened);
  EXPECT_EQ(listened.error().code, ErrorCode::kConfig);
  EXPECT_NE(listened.error().message.find("--key-file"), std::string::npos);
  auto connected = endpoint.connect("127.0.0.1:9", ChannelOptions{}, kTimeoutNs);
  ASSERT_FALSE(connected);
  EXPECT_EQ(connected.error().code, ErrorCode::kConfig);
}

TEST(TcpSealed, WrongKeyCannotConnectEitherWay) {
  Pair p = connect(keyed(SecurityMode::kAuthenticate, 0x40), keyed(SecurityMode::kAuthenticate),
                   nullptr, 2'000'000'000);
  ASSERT_FALSE(p.to_server);
  EXPECT_FALSE(p.at_server);
  EXPECT_EQ(p.server->handshakes_rejected(), 1u) << p.server->last_handshake_error();
  EXPECT_NE(p.server->last_handshake_error().find("did not prove the key"), std::string::npos)
      << p.server->last_handshake_error();
}

TEST(TcpSealed, ModeMismatchIsAClearError) {
  {
    EndpointOptions plain;
    plain.security = Security::none();
    Pair p = connect(keyed(SecurityMode::kAuthenticate), plain);
    ASSERT_FALSE(p.to_server);
    EXPECT_NE(p.to_server.error().message.find("security mode mismatch"), std::string::npos)
        << p.to_server.error().message;
    EXPECT_FALSE(p.at_server);
  }
  {
    Pair p = connect(keyed(SecurityMode::kEncrypt), keyed(SecurityMode::kAuthenticate));
    ASSERT_FALSE(p.to_server);
    EXPECT_NE(p.to_server.error().message.find("security mode mismatch"), std::string::npos)
        << p.to_server.error().message;
    EXPECT_FALSE(p.at_server);
  }
}

// A relay between client and server that flips one byte of the client's stream at
// `flip_at` (counted from the first byte the client sends).
class Relay {
 public:
  explicit Relay(size_t flip_at) : flip_at_(flip_at) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length);
    ::listen(listener_, 1);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~Relay() {
    ::shutdown(listener_, SHUT_RDWR);
    {
      std::lock_guard lock(mutex_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
    for (int fd : fds_) ::close(fd);
  }
  // Starts relaying to `server` ("127.0.0.1:PORT"); returns the relay's address.
  std::string start(const std::string& server) {
    const auto server_port = static_cast<uint16_t>(std::stoi(server.substr(server.rfind(':') + 1)));
    thread_ = std::thread([this, server_port] {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      {
        std::lock_guard lock(mutex_);
        fds_.push_back(client);
        fds_.push_back(upstream);
      }
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      to.sin_port = htons(server_port);
      if (::connect(upstream, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) return;
      std::thread forward([this, client, upstream] { pump(client, upstream, true); });
      pump(upstream, client, false);
      forward.join();
    });
    return "127.0.0.1:" + std::to_string(port_);
  }

 private:
  void pump(int from, int to, bool tamper) {
    std::vector<char> buffer(1 << 16);
    size_t seen = 0;
    for (;;) {
      const ssize_t n = ::read(from, buffer.data(), buffer.size());
      if (n <= 0) break;
      if (tamper && flip_at_ >= seen && flip_at_ < seen + static_cast<size_t>(n)) {
        buffer[flip_at_ - seen] ^= 0x01;
      }
      seen += static_cast<size_t>(n);
      // MSG_NOSIGNAL: the side that found the tampered record may have closed already (a
      // write() would raise SIGPIPE and kill the test process).
      if (::send(to, buffer.data(), static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    ::shutdown(to, SHUT_WR);
  }

  size_t flip_at_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::mutex mutex_;
  std::vector<int> fds_;  // guarded by mutex_
  std::thread thread_;
};

TEST(TcpSealed, TamperedRecordFailsTheChannelWithAClearError) {
  for (const SecurityMode mode : {SecurityMode::kAuthenticate, SecurityMode::kEncrypt}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    // The client's hello (49 bytes), the first message's length record (4 + 8 + 16), then the
    // header of its first data record (4): byte 10 of that record's payload.
    Relay relay(49 + 28 + 4 + 10);
    Pair p = connect(keyed(mode), keyed(mode),
                     [&](const std::string& server) { return relay.start(server); });
    ASSERT_TRUE(p.to_server) << p.to_server.error().message;
    ASSERT_TRUE(p.at_server) << p.at_server.error().message;
    const auto message = random_message(100'000, 3);
    auto received = (*p.at_server)->recv();
    (void)await((*p.to_server)->send(message));
    auto got = await(std::move(received));
    ASSERT_FALSE(got) << "a tampered message was delivered";
    EXPECT_EQ(got.error().code, ErrorCode::kIo);
    EXPECT_NE(got.error().message.find("failed authentication"), std::string::npos)
        << got.error().message;
    EXPECT_EQ((*p.at_server)->stats().dropped_auth, 1u);
    EXPECT_EQ((*p.at_server)->stats().messages_received, 0u);
  }
}

}  // namespace
}  // namespace detwan::transport::tcp
