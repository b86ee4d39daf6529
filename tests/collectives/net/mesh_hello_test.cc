// connect_mesh's hello: only a member of the communicator (its key) can take a rank's place,
// and a hello made for another acceptor, another communicator or a rank not awaited is refused
// while the acceptor keeps waiting for the genuine peer.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <span>
#include <string>
#include <vector>

#include "collectives/net/mesh.h"
#include "tests/collectives/mesh_util.h"
#include "transport/registry.h"

namespace detwan::collectives {
namespace {

using testing::test_mesh_key;
using Channels = std::vector<std::unique_ptr<transport::Channel>>;

constexpr int64_t kGuardNs = 30'000'000'000;  // hang guard only

MeshKey other_key() {
  MeshKey key = test_mesh_key();
  key[0] ^= std::byte{1};
  return key;
}

std::unique_ptr<transport::Endpoint> loopback_endpoint(std::string* address) {
  transport::EndpointOptions options;
  options.security =
      transport::Security::keyed(test_mesh_key(), transport::SecurityMode::kAuthenticate, "test");
  auto endpoint = transport::make_endpoint("loopback", options);
  EXPECT_TRUE(endpoint.has_value());
  auto listened = (*endpoint)->listen("");
  EXPECT_TRUE(listened.has_value());
  *address = *listened;
  return std::move(*endpoint);
}

std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

// Connects to `address` from `endpoint` and sends `hello` (if any) as the first message.
std::unique_ptr<transport::Channel> call_with(transport::Endpoint& endpoint,
                                              const std::string& address,
                                              const std::vector<std::byte>* hello) {
  auto channel = endpoint.connect(address, {}, kGuardNs);
  EXPECT_TRUE(channel.has_value());
  if (hello != nullptr) {
    auto sent = (*channel)->send(std::span<const std::byte>(*hello));
    EXPECT_TRUE(sent.get().has_value());
  }
  return std::move(*channel);
}

struct TwoRanks {
  std::string address0;
  std::string address1;
  std::unique_ptr<transport::Endpoint> rank0 = loopback_endpoint(&address0);
  std::unique_ptr<transport::Endpoint> rank1 = loopback_endpoint(&address1);
  Topology topology = *Topology::build({"a", "a"});
  std::vector<RankAddresses> addresses{{address0, address0}, {address1, address1}};

  std::future<Result<Channels>> run(int rank, const MeshKey& key, int64_t timeout_ns,
                                    MeshStats* stats = nullptr) {
    transport::Endpoint* endpoint = rank == 0 ? rank0.get() : rank1.get();
    return std::async(std::launch::async, [=, this] {
      return connect_mesh(
          rank, topology, {endpoint, endpoint}, addresses,
          [](int) { return transport::ChannelOptions{}; }, key, timeout_ns, stats);
    });
  }
};

TEST(MeshHello, ForgedAndMisdirectedHellosAreRefusedAndTheGenuinePeerConnects) {
  TwoRanks ranks;
  MeshStats stats;
  auto accepting = ranks.run(1, test_mesh_key(), kGuardNs, &stats);
  // Strangers call rank 1 first, each claiming rank 0.
  std::string rogue_address;
  auto rogue = loopback_endpoint(&rogue_address);
  const auto wrong_key = *mesh_hello(other_key(), 0, 1);        // another communicator
  const auto for_another = *mesh_hello(test_mesh_key(), 0, 2);  // made for rank 2 (replayed)
  const auto not_awaited = *mesh_hello(test_mesh_key(), 7, 1);  // a rank not lower than 1
  const auto garbage = bytes_of(std::string_view("dtwnmesh\0\0\0\0", 12));  // the old hello
  std::vector<std::unique_ptr<transport::Channel>> strangers;
  for (const auto* hello : {&wrong_key, &for_another, &not_awaited, &garbage}) {
    strangers.push_back(call_with(*rogue, ranks.address1, hello));
  }
  strangers.push_back(call_with(*rogue, ranks.address1, nullptr));  // says nothing at all
  // Then the genuine rank 0.
  auto connecting = ranks.run(0, test_mesh_key(), kGuardNs);
  auto mesh0 = connecting.get();
  auto mesh1 = accepting.get();
  ASSERT_TRUE(mesh0.has_value()) << mesh0.error().message;
  ASSERT_TRUE(mesh1.has_value()) << mesh1.error().message;
  EXPECT_EQ(stats.bad_hellos.load(), 3u);
  EXPECT_EQ(stats.unexpected_rank.load(), 1u);
  // The channel rank 1 kept for rank 0 is rank 0's own.
  const auto message = bytes_of("from the genuine rank 0");
  ASSERT_TRUE((*mesh0)[1]->send(std::span<const std::byte>(message)).get().has_value());
  auto received = (*mesh1)[0]->recv().get();
  ASSERT_TRUE(received.has_value()) << received.error().message;
  EXPECT_EQ(*received, message);
}

TEST(MeshHello, ARankWithAnotherCommunicatorsKeyNeverConnects) {
  TwoRanks ranks;
  MeshStats stats;
  auto accepting = ranks.run(1, test_mesh_key(), 1'000'000'000, &stats);
  auto connecting = ranks.run(0, other_key(), kGuardNs);
  (void)connecting.get();  // its hello is sent; the acceptor is the one that refuses it
  auto mesh1 = accepting.get();
  ASSERT_FALSE(mesh1.has_value());
  EXPECT_EQ(mesh1.error().code, ErrorCode::kTimeout);
  EXPECT_NE(mesh1.error().message.find("rank 0 never connected (1 hello refused)"),
            std::string::npos)
      << mesh1.error().message;
  EXPECT_EQ(stats.bad_hellos.load(), 1u);
}

TEST(MeshHello, HellosDifferByCallerAcceptorAndKey) {
  const auto base = *mesh_hello(test_mesh_key(), 0, 1);
  EXPECT_EQ(base.size(), 48u);
  EXPECT_NE(base, *mesh_hello(test_mesh_key(), 1, 0));
  EXPECT_NE(base, *mesh_hello(test_mesh_key(), 0, 2));
  EXPECT_NE(base, *mesh_hello(other_key(), 0, 1));
  EXPECT_EQ(base, *mesh_hello(test_mesh_key(), 0, 1));
}

}  // namespace
}  // namespace detwan::collectives
