// A replica's counters (control/daemon/replica_metrics.h): every counter of the table is in
// GET /healthz's "election" object and in GET /metrics under its family, with the same value,
// and the gauges are in both too.
#include "control/daemon/replica_metrics.h"

#include <map>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/common/exposition_samples.h"

namespace detwan::control::daemon {
namespace {

std::map<std::string, double> samples_of(const std::string& text) {
  return detwan::test_support::exposition_samples(text);
}

TEST(ReplicaMetrics, EveryCounterIsInHealthzAndTheExpositionWithTheSameValue) {
  ReplicaState state;
  state.replica = "r2";
  state.leading = true;
  state.warm_rows = 1234;
  // Distinct values, so that a field written under another's name is caught.
  uint64_t value = 11;
  for (const auto& field : kReplicaFields) state.counters.*field.member = value++;

  const auto samples = samples_of(replica_metrics_text(state));
  const boost::json::object json = replica_json(state);
  const auto& counters = json.at("counters").as_object();
  EXPECT_EQ(counters.size(), std::size(kReplicaFields));
  for (const auto& field : kReplicaFields) {
    SCOPED_TRACE(std::string(field.key));
    const uint64_t expected = state.counters.*field.member;
    EXPECT_EQ(counters.at(field.key).to_number<uint64_t>(), expected);
    const auto it =
        samples.find(fmt::format("{}{}{{replica=\"r2\"}}", kReplicaPrefix, field.metric));
    ASSERT_NE(it, samples.end()) << "not in the exposition";
    EXPECT_EQ(it->second, static_cast<double>(expected));
  }
  EXPECT_EQ(samples.at("detwan_agent_leader{replica=\"r2\"}"), 1);
  EXPECT_EQ(samples.at("detwan_agent_warm_rows{replica=\"r2\"}"), 1234);
  EXPECT_TRUE(json.at("leading").as_bool());
  EXPECT_EQ(json.at("warm_rows").to_number<uint64_t>(), 1234u);
  // Every sample is one of those: nothing is written by hand beside the table.
  EXPECT_EQ(samples.size(), std::size(kReplicaFields) + 2);
}

TEST(ReplicaMetrics, AFollowerSaysSo) {
  ReplicaState state;
  state.replica = "r1";
  const auto samples = samples_of(replica_metrics_text(state));
  EXPECT_EQ(samples.at("detwan_agent_leader{replica=\"r1\"}"), 0);
  EXPECT_FALSE(replica_json(state).at("leading").as_bool());
}

}  // namespace
}  // namespace detwan::control::daemon
