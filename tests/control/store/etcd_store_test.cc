// control/store/etcd_store.h and leader_election.h against a real etcd (Debian's etcd-server):
// a transition round-trips (bodies, requests, keys; the event without its key secrets, every
// value sealed in etcd), a wrong store key or domain is refused, a fenced store cannot write
// once its lease is gone, exactly one of two replicas leads and the other takes over when the
// leader resigns, paging past a page of keys, a follower's warm copy (what changed, nothing
// else), and `migrate` both ways between SQLite and etcd.
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/journal/journal.h"
#include "control/store/etcd_store.h"
#include "control/store/leader_election.h"
#include "control/store/warm_rows.h"
#include "tests/control/store/etcd_process.h"

namespace detwan::control::store {
namespace {

const std::string kKey(kStoreKeyBytes, '\x42');
constexpr int64_t kTestPageKeys = 50;

std::string body_of(int n, bool secret) {
  return fmt::format(
      R"({{"id":"r-{}","key":{},"state":"held","tunnel_keys":{{"keys":[{{"id":1,{}"fingerprint":"f{}"}}]}}}})",
      n, n, secret ? R"("secret":"U0VDUkVULVZBTFVF",)" : "", n);
}

journal::Event event_of(int n, const std::string& to) {
  return journal::Event{0, 1000 + n, fmt::format("r-{}", n), "", to, "test", body_of(n, true)};
}

class EtcdStoreTest : public EtcdFixture {
 protected:
  std::unique_ptr<EtcdStore> open(const std::string& domain = "lab", Fence fence = {},
                                  const std::string& key = kKey) {
    EtcdStoreOptions options{domain, key, std::move(fence)};
    options.page_keys = kTestPageKeys;  // loads page several times with a few hundred keys
    auto store = EtcdStore::open(client_, std::move(options), "test");
    EXPECT_TRUE(store) << store.error().message;
    return store ? std::move(*store) : nullptr;
  }
};

TEST_F(EtcdStoreTest, TransitionsRoundTripSealedAndEventsWithoutSecrets) {
  auto store = open();
  ASSERT_TRUE(store);
  const journal::RequestRecord request{"req-1", "fp", "r-1"};
  ASSERT_TRUE(store->record(event_of(1, "held"), 2, &request));
  ASSERT_TRUE(store->record(event_of(1, "committed"), 2, nullptr));
  ASSERT_TRUE(store->record(event_of(2, "held"), 3, nullptr));
  const std::string pool = R"({"name":"p1","gpus":8})";
  ASSERT_TRUE(store->put_pool("p1", &pool));
  ASSERT_TRUE(store->put_federation("segment", "s-2", "{\"b\":1}", 0, 0));
  ASSERT_TRUE(store->put_federation("segment", "s-1", "{\"a\":1}", 0, 7));
  EXPECT_EQ(store->commits(), 6u);

  // A fresh store (another replica) reads it all back.
  auto again = open();
  ASSERT_TRUE(again);
  auto loaded = again->load();
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->next_key, 7u);
  ASSERT_EQ(loaded->reservations.size(), 2u);
  EXPECT_NE(loaded->reservations[0].find("U0VDUkVULVZBTFVF"), std::string::npos);  // kept here
  ASSERT_EQ(loaded->requests.size(), 1u);
  EXPECT_EQ(loaded->requests[0].reservation_id, "r-1");
  EXPECT_EQ(loaded->requests[0].fingerprint, "fp");
  ASSERT_EQ(loaded->pools.size(), 1u);
  EXPECT_EQ(loaded->pools[0], pool);
  EXPECT_EQ(loaded->events, 3);
  std::vector<journal::Event> events;
  ASSERT_TRUE(again->for_each_event([&](const journal::Event& e) { events.push_back(e); }));
  ASSERT_EQ(events.size(), 3u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq, static_cast<int64_t>(i + 1));
    EXPECT_EQ(events[i].body.find("U0VDUkVULVZBTFVF"), std::string::npos) << events[i].body;
    EXPECT_NE(events[i].body.find("\"fingerprint\""), std::string::npos);
  }
  EXPECT_EQ(events[1].to, "committed");
  auto rows = again->federation_rows("segment");
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].first, "s-2");  // the order they were first written
  EXPECT_EQ((*rows)[1].first, "s-1");
  // The next event continues the sequence (read from etcd, not remembered).
  ASSERT_TRUE(again->record(event_of(3, "held"), 8, nullptr));
  // etcd holds no value in clear: neither the secret nor the reservation's id.
  auto raw = client_->range(domain_prefix("lab"), prefix_end(domain_prefix("lab")));
  ASSERT_TRUE(raw);
  ASSERT_GE(raw->kvs.size(), 10u);
  for (const KeyValue& kv : raw->kvs) {
    EXPECT_EQ(kv.value.find("U0VDUkVU"), std::string::npos) << kv.key;
    EXPECT_EQ(kv.value.find("r-1"), std::string::npos) << kv.key;
  }
  ASSERT_TRUE(again->erase_freed());  // compaction: values stay
  auto after = open()->load();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->reservations.size(), 3u);
}

TEST_F(EtcdStoreTest, AnotherKeyOrDomainIsRefusedAndAMovedValueDoesNotOpen) {
  ASSERT_TRUE(open("lab"));
  auto wrong = EtcdStore::open(client_, EtcdStoreOptions{"lab", std::string(32, 'x'), {}}, "t");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, common::ErrorCode::kConfig);
  EXPECT_NE(wrong.error().message.find("store key"), std::string::npos) << wrong.error().message;
  auto short_key = EtcdStore::open(client_, EtcdStoreOptions{"lab", "short", {}}, "t");
  ASSERT_FALSE(short_key);
  // A value copied under another key (an attacker with etcd access) does not open there.
  auto store = open("lab");
  ASSERT_TRUE(store->record(event_of(1, "held"), 2, nullptr));
  auto one = client_->range(domain_prefix("lab") + "reservations/r-1");
  ASSERT_TRUE(one);
  ASSERT_EQ(one->kvs.size(), 1u);
  ASSERT_TRUE(client_->put(domain_prefix("lab") + "reservations/r-9", one->kvs[0].value));
  auto loaded = open("lab")->load();
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message.find("reservations/r-9"), std::string::npos)
      << loaded.error().message;
}

TEST_F(EtcdStoreTest, AFencedStoreCannotWriteOnceItsLeaseIsGone) {
  auto election = LeaderElection::start(client_, ElectionOptions{"lab", "a", "http://a", 2});
  ASSERT_TRUE(election);
  std::optional<Fence> fence;
  for (int i = 0; i < 200 && !fence; ++i) {
    fence = (*election)->term();
    if (!fence) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fence) << "a lone replica was not elected";
  EXPECT_TRUE((*election)->leading_now());
  auto store = open("lab", *fence);
  ASSERT_TRUE(store->load());
  ASSERT_TRUE(store->record(event_of(1, "held"), 2, nullptr));
  // Resigning ends the term here at once and revokes the lease: once etcd has the revocation,
  // the leader key is gone with it. (Until then the lease is still this replica's and a write
  // may still commit: no other replica can be elected before the key is gone.)
  (*election)->resign();
  const std::string leader_key = domain_prefix("lab") + "leader";
  // Gone: no leader key, or one of a later term (the replica stands again after resigning).
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    auto key = client_->range(leader_key);
    gone = key && (key->kvs.empty() || key->kvs.front().create_revision != fence->create_revision);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(gone) << "the resigned term's leader key stayed";
  // Whatever the election does next, this term's store cannot commit.
  auto refused = store->record(event_of(2, "held"), 3, nullptr);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, common::ErrorCode::kUnavailable);
  EXPECT_NE(refused.error().message.find("no longer the leader"), std::string::npos)
      << refused.error().message;
  auto loaded = open("lab")->load();
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->events, 1);
  EXPECT_EQ(loaded->reservations.size(), 1u);
}

TEST_F(EtcdStoreTest, ExactlyOneReplicaLeadsAndAnotherTakesOverWhenItGoes) {
  auto a = LeaderElection::start(client_, ElectionOptions{"lab", "a", "http://a", 2});
  auto b = LeaderElection::start(client_, ElectionOptions{"lab", "b", "http://b", 2});
  ASSERT_TRUE(a && b);
  auto settled = [&] {
    for (int i = 0; i < 300; ++i) {
      const bool la = (*a)->term().has_value(), lb = (*b)->term().has_value();
      if (la != lb && (*a)->leader() && (*b)->leader()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  ASSERT_TRUE(settled());
  LeaderElection& leader = (*a)->term() ? **a : **b;
  std::unique_ptr<LeaderElection>& follower = (*a)->term() ? *b : *a;
  const int64_t first_term = leader.term()->create_revision;
  EXPECT_EQ(follower->leader()->replica, leader.leader()->replica);  // both see the same one
  // The leader goes away (its destructor resigns): the follower is elected, in a new term.
  std::unique_ptr<LeaderElection>& leader_ptr = (*a)->term() ? *a : *b;
  leader_ptr.reset();
  std::optional<Fence> next;
  for (int i = 0; i < 300 && !next; ++i) {
    next = follower->term();
    if (!next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(next) << "the follower was not elected";
  EXPECT_GT(next->create_revision, first_term);
  EXPECT_EQ(follower->terms_won(), 1u);
}

TEST_F(EtcdStoreTest, LoadPagesPastOneRange) {
  auto store = open();
  const int n = 3 * static_cast<int>(kTestPageKeys) + 37;
  for (int i = 1; i <= n; ++i) {
    ASSERT_TRUE(store->record(event_of(i, "held"), static_cast<uint64_t>(i + 1), nullptr));
  }
  auto loaded = open()->load();
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->reservations.size(), static_cast<size_t>(n));
  EXPECT_EQ(loaded->events, n);
  int64_t seen = 0;
  ASSERT_TRUE(open()->for_each_event([&](const journal::Event& e) { EXPECT_EQ(e.seq, ++seen); }));
  EXPECT_EQ(seen, n);
}

TEST_F(EtcdStoreTest, AWarmCopyLoadsWhatAFullLoadDoesReadingOnlyWhatChanged) {
  auto leader = open();
  ASSERT_TRUE(leader);
  const int n = 3 * static_cast<int>(kTestPageKeys) + 11;
  for (int i = 1; i <= n; ++i) {
    const journal::RequestRecord request{fmt::format("req-{}", i), "fp", fmt::format("r-{}", i)};
    ASSERT_TRUE(leader->record(event_of(i, "held"), static_cast<uint64_t>(i + 1),
                               i % 10 == 0 ? &request : nullptr));
  }
  const std::string p1 = R"({"name":"p1","gpus":8})";
  const std::string p2 = R"({"name":"p2","gpus":4})";
  ASSERT_TRUE(leader->put_pool("p1", &p1));
  ASSERT_TRUE(leader->put_pool("p2", &p2));
  const uint64_t rows = static_cast<uint64_t>(n + n / 10 + 2);

  // A follower's copy: the first sync reads everything, the next nothing.
  auto warm = std::make_shared<WarmRows>(client_, domain_prefix("lab"), kKey, kTestPageKeys);
  auto first = warm->sync();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->full);
  EXPECT_EQ(first->listed, rows);
  EXPECT_EQ(first->read, rows);
  EXPECT_EQ(warm->rows(), rows);
  EXPECT_EQ(first->listings, 3u);
  auto idle = warm->sync();
  ASSERT_TRUE(idle);
  EXPECT_FALSE(idle->full);
  EXPECT_EQ(idle->read, 0u);
  EXPECT_EQ(idle->dropped, 0u);
  EXPECT_EQ(idle->listed, rows);
  EXPECT_EQ(idle->listings, 0u);  // nothing deleted: counts and changes only, no listing

  // Writes without a deletion: the two rows written are read, nothing is listed.
  ASSERT_TRUE(leader->record(event_of(100, "committed"), static_cast<uint64_t>(n + 1), nullptr));
  ASSERT_TRUE(leader->record(event_of(101, "committed"), static_cast<uint64_t>(n + 1), nullptr));
  auto puts = warm->sync();
  ASSERT_TRUE(puts) << puts.error().message;
  EXPECT_EQ(puts->read, 2u);
  EXPECT_EQ(puts->listings, 0u);
  EXPECT_EQ(puts->listed, rows);

  // The leader moves on: 5 transitions, 3 new reservations (one with a request), 4 archived,
  // one pool changed and one erased.
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(leader->record(event_of(i, "committed"), static_cast<uint64_t>(n + 1), nullptr));
  }
  const journal::RequestRecord late{"req-late", "fp", fmt::format("r-{}", n + 1)};
  for (int i = n + 1; i <= n + 3; ++i) {
    ASSERT_TRUE(leader->record(event_of(i, "held"), static_cast<uint64_t>(i + 1),
                               i == n + 1 ? &late : nullptr));
  }
  std::vector<journal::ArchivedRow> gone;
  for (int i = 6; i <= 9; ++i) {
    gone.push_back({static_cast<uint64_t>(i), fmt::format("r-{}", i), body_of(i, false), 1});
  }
  ASSERT_TRUE(leader->archive(gone));
  const std::string p1_bigger = R"({"name":"p1","gpus":16})";
  ASSERT_TRUE(leader->put_pool("p1", &p1_bigger));
  ASSERT_TRUE(leader->put_pool("p2", nullptr));

  // An elected replica with the copy loads exactly what one reading everything does, and reads
  // only the rows that changed.
  EtcdStoreOptions options{"lab", kKey, {}};
  options.page_keys = kTestPageKeys;
  options.warm = warm;
  auto elected = EtcdStore::open(client_, std::move(options), "warm");
  ASSERT_TRUE(elected);
  auto from_warm = (*elected)->load();
  ASSERT_TRUE(from_warm) << from_warm.error().message;
  auto from_all = open()->load();
  ASSERT_TRUE(from_all);
  EXPECT_EQ(from_warm->reservations, from_all->reservations);
  EXPECT_EQ(from_warm->reservations.size(), static_cast<size_t>(n + 3 - 4));
  EXPECT_EQ(from_warm->pools, std::vector<std::string>{p1_bigger});
  EXPECT_EQ(from_warm->pools, from_all->pools);
  ASSERT_EQ(from_warm->requests.size(), from_all->requests.size());
  for (size_t i = 0; i < from_all->requests.size(); ++i) {
    EXPECT_EQ(from_warm->requests[i].client_request_id, from_all->requests[i].client_request_id);
    EXPECT_EQ(from_warm->requests[i].reservation_id, from_all->requests[i].reservation_id);
  }
  EXPECT_EQ(from_warm->next_key, from_all->next_key);
  EXPECT_EQ(from_warm->events, from_all->events);
  ASSERT_TRUE((*elected)->warm_sync().has_value());
  const WarmSyncCounts& counts = *(*elected)->warm_sync();
  EXPECT_FALSE(counts.full);
  EXPECT_EQ(counts.read, 5u + 3u + 1u + 1u);  // transitions, new, their request, pool p1
  EXPECT_EQ(counts.dropped, 4u + 1u);          // archived, pool p2
  EXPECT_EQ(counts.listings, 2u);              // the sections that lost a key: listed
  EXPECT_EQ(warm->rows(), 0u);                 // moved out to the load

  // A value that does not open under the store key fails the sync, naming its key.
  auto moved = client_->range(domain_prefix("lab") + "reservations/r-1");
  ASSERT_TRUE(moved);
  ASSERT_EQ(moved->kvs.size(), 1u);
  ASSERT_TRUE(client_->put(domain_prefix("lab") + "reservations/r-x", moved->kvs[0].value));
  auto refused = warm->sync();
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("reservations/r-x"), std::string::npos)
      << refused.error().message;
}

TEST_F(EtcdStoreTest, MigrateMovesAJournalToEtcdAndBack) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("detwan-migrate-test-{}", ::getpid());
  std::filesystem::create_directories(dir);
  {
    auto sqlite = journal::Journal::open((dir / "a.db").string(), false, "lab");
    ASSERT_TRUE(sqlite) << sqlite.error().message;
    const journal::RequestRecord request{"req-1", "fp", "r-1"};
    ASSERT_TRUE((*sqlite)->record(event_of(1, "held"), 2, &request));
    ASSERT_TRUE((*sqlite)->record(event_of(1, "committed"), 2, nullptr));
    ASSERT_TRUE((*sqlite)->record(event_of(2, "held"), 3, nullptr));
    const std::string pool = R"({"name":"p1","gpus":8})";
    ASSERT_TRUE((*sqlite)->put_pool("p1", &pool));
    ASSERT_TRUE((*sqlite)->put_federation("aggregate", "fr-1", "{\"x\":1}", 5, 0));
    auto from = journal::snapshot_of(**sqlite);
    ASSERT_TRUE(from) << from.error().message;
    auto etcd = open();
    ASSERT_TRUE(etcd->import_snapshot(*from));
    auto refused = etcd->import_snapshot(*from);  // not into a domain that has a state
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, common::ErrorCode::kConfig);
    auto in_etcd = journal::snapshot_of(*open());
    ASSERT_TRUE(in_etcd) << in_etcd.error().message;
    EXPECT_EQ(in_etcd->state.next_key, 3u);
    EXPECT_EQ(in_etcd->state.reservations, from->state.reservations);
    EXPECT_EQ(in_etcd->events.size(), 3u);
    EXPECT_EQ(in_etcd->state.requests.size(), 1u);
    EXPECT_EQ(in_etcd->state.pools, from->state.pools);
    ASSERT_EQ(in_etcd->federation.size(), 1u);
    EXPECT_EQ(in_etcd->federation[0].id, "fr-1");
    // A replica continues after the imported events.
    auto store = open();
    ASSERT_TRUE(store->load());
    ASSERT_TRUE(store->record(event_of(3, "held"), 4, nullptr));
    // And back into a new SQLite journal.
    auto back = journal::Journal::open((dir / "b.db").string(), false, "lab");
    ASSERT_TRUE(back);
    auto all = journal::snapshot_of(*open());
    ASSERT_TRUE(all);
    ASSERT_TRUE((*back)->import_snapshot(*all));
    auto reread = journal::snapshot_of(**back);
    ASSERT_TRUE(reread);
    EXPECT_EQ(reread->state.reservations.size(), 3u);
    EXPECT_EQ(reread->events.size(), 4u);
    EXPECT_EQ(reread->state.next_key, 4u);
    EXPECT_EQ(reread->federation.size(), 1u);
    EXPECT_FALSE((*back)->import_snapshot(*all));
  }
  std::filesystem::remove_all(dir);
}

// Both stores: archived rows leave load(), are found by key and paged in key order, their
// events stay, and a migrate carries them.
TEST_F(EtcdStoreTest, ArchivedRowsLeaveTheLoadAndAreFoundPagedAndMigrated) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("detwan-archive-test-{}", ::getpid());
  std::filesystem::create_directories(dir);
  {
    auto sqlite = journal::Journal::open((dir / "a.db").string(), false, "lab");
    ASSERT_TRUE(sqlite) << sqlite.error().message;
    auto etcd = open();
    ASSERT_TRUE(etcd);
    for (journal::Store* store : {static_cast<journal::Store*>(sqlite->get()),
                                  static_cast<journal::Store*>(etcd.get())}) {
      SCOPED_TRACE(store->path());
      for (int i = 1; i <= 120; ++i) {
        ASSERT_TRUE(store->record(event_of(i, "terminated"), static_cast<uint64_t>(i + 1), nullptr));
      }
      std::vector<journal::ArchivedRow> rows;
      for (int i = 1; i <= 110; ++i) {
        rows.push_back({static_cast<uint64_t>(i), fmt::format("r-{}", i), body_of(i, false), 5000});
      }
      ASSERT_TRUE(store->archive(rows));  // etcd: in three transactions
      auto loaded = store->load();
      ASSERT_TRUE(loaded) << loaded.error().message;
      EXPECT_EQ(loaded->reservations.size(), 10u);
      EXPECT_EQ(loaded->events, 120);  // the history stays
      auto found = store->find_archived(7);
      ASSERT_TRUE(found && found->has_value());
      EXPECT_EQ((*found)->id, "r-7");
      EXPECT_EQ((*found)->body, body_of(7, false));
      EXPECT_EQ((*found)->at_ns, 5000);
      auto hot = store->find_archived(115);
      ASSERT_TRUE(hot);
      EXPECT_FALSE(hot->has_value());
      auto tail = store->archived_after(100, 50);
      ASSERT_TRUE(tail);
      ASSERT_EQ(tail->size(), 10u);
      for (size_t i = 0; i < tail->size(); ++i) EXPECT_EQ((*tail)[i].key, 101 + i);
      auto head = store->archived_after(0, 3);
      ASSERT_TRUE(head);
      ASSERT_EQ(head->size(), 3u);
      EXPECT_EQ(head->back().id, "r-3");
    }
    auto from = journal::snapshot_of(**sqlite);
    ASSERT_TRUE(from) << from.error().message;
    EXPECT_EQ(from->archived.size(), 110u);
    auto other = open("lab-archive");
    ASSERT_TRUE(other->import_snapshot(*from));
    auto moved = journal::snapshot_of(*other);
    ASSERT_TRUE(moved) << moved.error().message;
    EXPECT_EQ(moved->archived.size(), 110u);
    EXPECT_EQ(moved->state.reservations.size(), 10u);
    EXPECT_EQ(moved->archived[109].body, body_of(110, false));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace detwan::control::store
