// The verbs backend's parts that run without an RDMA device: the registry's reason, and the
// TCP bootstrap that exchanges QP info (listen/accept/connect, validation of the peer's info).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <future>

#include <sys/socket.h>

#include "transport/registry.h"
#include "transport/verbs/bootstrap.h"
#include "transport/verbs/endpoint.h"

namespace detwan::transport::verbs {
namespace {

constexpr int64_t kTimeoutNs = 10'000'000'000;

TEST(VerbsBackendTest, WithoutDeviceIsUnusableWithReason) {
  const BackendInfo info = backend_info();
  EXPECT_TRUE(info.compiled);
  if (info.usable) GTEST_SKIP() << "this machine has an RDMA device";
  EXPECT_EQ(info.reason, "no RDMA device (ibv_get_device_list found 0 devices)");
  auto endpoint = transport::make_endpoint("verbs");
  ASSERT_FALSE(endpoint);
  EXPECT_EQ(endpoint.error().code, common::ErrorCode::kUnavailable);
  EXPECT_NE(endpoint.error().message.find("0 devices"), std::string::npos);
}

TEST(VerbsBootstrapTest, ExchangesQpInfoBothWays) {
  std::string bound;
  auto listener = listen_tcp("127.0.0.1:0", bound);
  ASSERT_TRUE(listener) << listener.error().describe();
  ASSERT_NE(bound, "127.0.0.1:0");
  QpInfo server_info{.qpn = 17, .psn = 0xabcdef, .lid = 3, .gid = {}, .max_message_bytes = 1 << 20,
                     .recv_slots = 64};
  server_info.gid[15] = 1;
  auto server = std::async(std::launch::async, [&]() -> Result<QpInfo> {
    auto fd = accept_tcp(listener->get(), kTimeoutNs);
    if (!fd) return std::unexpected(fd.error());
    return exchange_qp_info(fd->get(), server_info, kTimeoutNs);
  });
  auto client_fd = connect_tcp(bound, kTimeoutNs);
  ASSERT_TRUE(client_fd) << client_fd.error().describe();
  const QpInfo client_info{.qpn = 99, .psn = 5, .lid = 7, .gid = {}, .max_message_bytes = 42,
                           .recv_slots = 8};
  auto from_server = exchange_qp_info(client_fd->get(), client_info, kTimeoutNs);
  auto from_client = server.get();
  ASSERT_TRUE(from_server) << from_server.error().describe();
  ASSERT_TRUE(from_client) << from_client.error().describe();
  EXPECT_EQ(from_server->qpn, 17u);
  EXPECT_EQ(from_server->psn, 0xabcdefu);
  EXPECT_EQ(from_server->lid, 3);
  EXPECT_EQ(from_server->gid[15], 1);
  EXPECT_EQ(from_server->max_message_bytes, 1u << 20);
  EXPECT_EQ(from_client->qpn, 99u);
  EXPECT_EQ(from_client->recv_slots, 8u);
}

TEST(VerbsBootstrapTest, RejectsBadMagicAndClosedPeer) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  common::UniqueFd ours(fds[0]), theirs(fds[1]);
  std::array<char, 42> garbage{};
  std::memcpy(garbage.data(), "HTTP", 4);
  ASSERT_EQ(::send(theirs.get(), garbage.data(), garbage.size(), 0),
            static_cast<ssize_t>(garbage.size()));
  auto info = exchange_qp_info(ours.get(), QpInfo{.recv_slots = 4}, kTimeoutNs);
  ASSERT_FALSE(info);
  EXPECT_NE(info.error().message.find("bad magic 0x48545450"), std::string::npos)
      << info.error().message;

  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  common::UniqueFd a(fds[0]), b(fds[1]);
  b.reset();
  auto closed = exchange_qp_info(a.get(), QpInfo{.recv_slots = 4}, kTimeoutNs);
  ASSERT_FALSE(closed);
}

TEST(VerbsBootstrapTest, ConnectToNobodyIsUnavailable) {
  std::string bound;
  {
    auto listener = listen_tcp("127.0.0.1:0", bound);
    ASSERT_TRUE(listener);
  }
  auto fd = connect_tcp(bound, kTimeoutNs);
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().code, common::ErrorCode::kUnavailable) << fd.error().describe();
  auto bad = connect_tcp("127.0.0.1", kTimeoutNs);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, common::ErrorCode::kInvalidArgument);
}

TEST(VerbsBootstrapTest, AcceptTimesOut) {
  std::string bound;
  auto listener = listen_tcp("127.0.0.1:0", bound);
  ASSERT_TRUE(listener);
  auto fd = accept_tcp(listener->get(), 1'000'000);
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().code, common::ErrorCode::kTimeout);
}

}  // namespace
}  // namespace detwan::transport::verbs
