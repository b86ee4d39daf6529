// The archive (docs/control.md, "Archive"): reservations final for agent.archive_after leave
// memory and the startup's load into the journal's archive, and are still read by id, listed,
// found by a repeated request's client_request_id, and refused as read-only.
#include <gtest/gtest.h>

#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using json = boost::json::object;

struct ArchiveTest : AgentFixture {
  void SetUp() override {
    extra_agent = "  archive_after: 1m";
    open();
  }
  size_t hot(std::optional<reservation::State> state = std::nullopt) {
    return agent->list(state).size();
  }
  std::vector<std::string> archived_ids(uint64_t after_key = 0, size_t limit = 0) {
    agent::Agent::ListQuery query;
    query.archived = true;
    query.after_key = after_key;
    query.limit = limit;
    const auto page = agent->list_page(query);
    EXPECT_FALSE(page.error.has_value());
    std::vector<std::string> ids;
    for (const auto& r : page.reservations) ids.push_back(id_of(r.as_object()));
    return ids;
  }
  void pass_time(int64_t ns) {
    realtime.advance_ns(ns);
    monotonic.advance_ns(ns);
    agent->tick();
  }
};

TEST_F(ArchiveTest, AFinalReservationLeavesMemoryAfterArchiveAfterAndIsStillReadable) {
  auto first = request("a", "c", 10'000'000, 600 * kSecond, 1);
  first.client_request_id = "job-7";
  first.commit = true;
  const std::string ended = id_of(reserve_ok(first));
  auto second = request("a", "b", 10'000'000, 3600 * kSecond, 2);
  second.commit = true;
  const std::string live = id_of(reserve_ok(second));
  ASSERT_EQ(state_of(*agent->terminate(ended)), "terminated");
  pass_time(30 * kSecond);  // final for 30 s: not yet
  EXPECT_EQ(hot(), 2u);
  EXPECT_TRUE(archived_ids().empty());
  pass_time(31 * kSecond);  // for 61 s: archived
  EXPECT_EQ(hot(), 1u);
  EXPECT_EQ(archived_ids(), std::vector<std::string>{ended});
  const auto read = agent->get(ended);
  ASSERT_TRUE(read.has_value()) << read.error().message;
  EXPECT_EQ(state_of(*read), "terminated");
  EXPECT_TRUE(read->at("archived").as_bool());
  EXPECT_EQ(state(live), "committed");  // the other one untouched
  EXPECT_EQ(agent->stats().at("counters").at("archived").to_number<uint64_t>(), 1u);

  // A restart loads only the hot state; the archived one is still answered.
  open();
  EXPECT_EQ(hot(), 1u);
  EXPECT_EQ(state(ended), "terminated");
  // The same request again (its client_request_id): the archived reservation, not a new one.
  const json again = reserve_ok(first);
  EXPECT_EQ(id_of(again), ended);
  EXPECT_TRUE(again.at("archived").as_bool());
  EXPECT_EQ(hot(), 1u);
  // Terminating it again is answered; anything else is refused as read-only, not "not found".
  EXPECT_EQ(state_of(*agent->terminate(ended)), "terminated");
  const auto commit = agent->commit(ended);
  ASSERT_FALSE(commit.has_value());
  EXPECT_EQ(commit.error().status, 409);
  EXPECT_NE(commit.error().message.find("archived"), std::string::npos) << commit.error().message;
  agent::ModifyRequest change;
  change.min_bandwidth_bps = 20'000'000;
  const auto modified = agent->modify(ended, change);
  ASSERT_FALSE(modified.has_value());
  EXPECT_EQ(modified.error().status, 409);
  // An id that never existed is still 404.
  EXPECT_EQ(agent->get("r-999").error().status, 404);
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(ArchiveTest, TheArchiveIsListedInKeyOrderPagedAndFiltered) {
  std::vector<std::string> ids;
  for (int i = 1; i <= 5; ++i) {
    ids.push_back(id_of(reserve_ok(request(i % 2 ? "a" : "b", i % 2 ? "c" : "a", 1'000'000,
                                           600 * kSecond, i))));
    ASSERT_TRUE(agent->terminate(ids.back()).has_value());
  }
  pass_time(120 * kSecond);
  EXPECT_EQ(hot(), 0u);
  EXPECT_EQ(archived_ids(), ids);
  // Two at a time from the second one on.
  const uint64_t second_key = std::stoull(ids[1].substr(2));
  EXPECT_EQ(archived_ids(second_key, 2), (std::vector<std::string>{ids[2], ids[3]}));
  agent::Agent::ListQuery query;
  query.archived = true;
  query.limit = 2;
  const auto page = agent->list_page(query);
  EXPECT_EQ(page.next, ids[1]);
  query.site = "c";  // a-c ones only: 1st, 3rd, 5th
  query.limit = 0;
  const auto to_c = agent->list_page(query);
  ASSERT_EQ(to_c.reservations.size(), 3u);
  EXPECT_EQ(id_of(to_c.reservations[2].as_object()), ids[4]);
}

TEST_F(ArchiveTest, ZeroNeverArchivesAndLessThanAMinuteIsRefused) {
  const auto refused = model::load_topology_string(lab_topology(journal, "  archive_after: 30s"));
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("archive_after"), std::string::npos)
      << refused.error().message;
  extra_agent = "  archive_after: 0s";
  open();
  const std::string id = id_of(reserve_ok(request("a", "c", 1'000'000, 600 * kSecond, 3)));
  ASSERT_TRUE(agent->terminate(id).has_value());
  pass_time(30 * 86'400 * kSecond);
  EXPECT_EQ(hot(), 1u);
  EXPECT_TRUE(archived_ids().empty());
}

}  // namespace
}  // namespace detwan::control::testing
