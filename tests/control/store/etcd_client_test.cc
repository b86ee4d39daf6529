// control/store/etcd_client.h against a real etcd (Debian's etcd-server, started here on
// loopback in a temporary directory): range/put/delete with binary keys and values, a
// compare-and-swap that exactly one of two racing clients wins, a lease whose revocation takes
// its key away, etcd's own refusals, and a client that moves past a member that does not answer.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/store/etcd_client.h"
#include "tests/control/store/etcd_process.h"

namespace detwan::control::store {
namespace {

using EtcdClientTest = EtcdFixture;

TEST_F(EtcdClientTest, PutRangeAndDeleteKeepBinaryKeysAndValuesIntact) {
  // Lengths 1..5 cover every base64 padding; values with NUL and 0xff bytes.
  std::vector<std::pair<std::string, std::string>> written;
  for (int n = 1; n <= 5; ++n) {
    std::string key = "dt/" + std::string(static_cast<size_t>(n), static_cast<char>('a' + n));
    std::string value(static_cast<size_t>(n), '\0');
    value.back() = static_cast<char>(0xff);
    auto revision = client_->put(key, value);
    ASSERT_TRUE(revision) << revision.error().message;
    EXPECT_GT(*revision, 0);
    written.emplace_back(key, value);
  }
  ASSERT_TRUE(client_->put("other/x", "y"));
  auto all = client_->range("dt/", prefix_end("dt/"));
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->kvs.size(), written.size());
  EXPECT_EQ(all->count, 5);
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(all->kvs[i].key, written[i].first);
    EXPECT_EQ(all->kvs[i].value, written[i].second);
    EXPECT_EQ(all->kvs[i].version, 1);
  }
  auto limited = client_->range("dt/", prefix_end("dt/"), 2);
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->kvs.size(), 2u);
  EXPECT_TRUE(limited->more);
  auto deleted = client_->erase("dt/", prefix_end("dt/"));
  ASSERT_TRUE(deleted);
  EXPECT_EQ(*deleted, 5);
  auto none = client_->range("dt/", prefix_end("dt/"));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->kvs.empty());
  auto other = client_->range("other/x");
  ASSERT_TRUE(other);
  ASSERT_EQ(other->kvs.size(), 1u);  // outside the prefix: untouched
}

// Two clients race to create one key (compare: it does not exist); exactly one wins, and the
// loser's failure branch reads the winner's value -- the primitive of leader election and of
// booking against a calendar's revision.
TEST_F(EtcdClientTest, CompareAndSwapHasExactlyOneWinner) {
  for (int round = 0; round < 20; ++round) {
    const std::string key = fmt::format("leader/{}", round);
    std::vector<TxnResult> results(2);
    std::vector<bool> ok(2, false);
    std::vector<std::thread> racers;
    for (int r = 0; r < 2; ++r) {
      racers.emplace_back([&, r] {
        auto c = EtcdClient::create({etcd_->url()});
        if (!c) return;
        auto t = (*c)->txn(
            {Compare{key, Compare::Target::kCreateRevision, Compare::Result::kEqual, 0, ""}},
            {Operation{Operation::Kind::kPut, key, fmt::format("replica-{}", r), "", 0, 0}},
            {Operation{Operation::Kind::kRange, key, "", "", 0, 0}});
        if (t) {
          results[r] = *t;
          ok[r] = true;
        }
      });
    }
    for (auto& t : racers) t.join();
    ASSERT_TRUE(ok[0] && ok[1]);
    ASSERT_NE(results[0].succeeded, results[1].succeeded) << "round " << round;
    const int loser = results[0].succeeded ? 1 : 0;
    ASSERT_EQ(results[loser].ranges.size(), 1u);
    ASSERT_EQ(results[loser].ranges[0].size(), 1u);
    EXPECT_EQ(results[loser].ranges[0][0].value, fmt::format("replica-{}", 1 - loser));
  }
  // A write conditioned on a revision that moved is refused (nothing written).
  auto first = client_->put("calendar/ab", "v1");
  ASSERT_TRUE(first);
  ASSERT_TRUE(client_->put("calendar/ab", "v2"));
  auto stale = client_->txn(
      {Compare{"calendar/ab", Compare::Target::kModRevision, Compare::Result::kEqual, *first, ""}},
      {Operation{Operation::Kind::kPut, "calendar/ab", "v3", "", 0, 0}});
  ASSERT_TRUE(stale);
  EXPECT_FALSE(stale->succeeded);
  EXPECT_EQ(client_->range("calendar/ab")->kvs.at(0).value, "v2");
}

TEST_F(EtcdClientTest, ARevokedLeaseTakesItsKeysAndCannotBeRenewed) {
  auto lease = client_->grant(30);
  ASSERT_TRUE(lease) << lease.error().message;
  EXPECT_NE(lease->id, 0);
  EXPECT_EQ(lease->ttl_s, 30);
  ASSERT_TRUE(client_->put("leader", "replica-1", lease->id));
  auto held = client_->range("leader");
  ASSERT_TRUE(held);
  ASSERT_EQ(held->kvs.size(), 1u);
  EXPECT_EQ(held->kvs[0].lease, lease->id);
  auto renewed = client_->keepalive(lease->id);
  ASSERT_TRUE(renewed) << renewed.error().message;
  EXPECT_GT(*renewed, 0);
  ASSERT_TRUE(client_->revoke(lease->id));
  EXPECT_TRUE(client_->range("leader")->kvs.empty());
  auto gone = client_->keepalive(lease->id);
  ASSERT_TRUE(gone);
  EXPECT_EQ(*gone, 0);
}

TEST_F(EtcdClientTest, EtcdsRefusalsComeBackWithItsMessage) {
  auto refused = client_->put("k", "v", 12345);  // no such lease
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, common::ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("requested lease not found"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(EtcdClient::create({}));
  EXPECT_FALSE(EtcdClient::create({"https://127.0.0.1:2379"}));  // no TLS yet: refused, not ignored
}

TEST_F(EtcdClientTest, MovesPastAMemberThatDoesNotAnswer) {
  const std::string dead = fmt::format("http://127.0.0.1:{}", free_port());
  auto c = EtcdClient::create({dead, etcd_->url()}, 1000);
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put("k", "v"));
  EXPECT_EQ((*c)->failovers(), 1u);
  EXPECT_EQ((*c)->current_endpoint(), etcd_->url());
  ASSERT_TRUE((*c)->range("k"));
  EXPECT_EQ((*c)->failovers(), 1u);  // stays on the member that answered
  auto nobody = EtcdClient::create({dead}, 500);
  ASSERT_TRUE(nobody);
  auto unavailable = (*nobody)->range("k");
  ASSERT_FALSE(unavailable);
  EXPECT_EQ(unavailable.error().code, common::ErrorCode::kUnavailable);
  EXPECT_NE(unavailable.error().message.find(dead), std::string::npos)
      << unavailable.error().message;
}

}  // namespace
}  // namespace detwan::control::store
