// The agent's counter registry (control/agent/agent_counters.h): every counter of GET /v1/stats
// is in GET /metrics under its family with the same value, after admissions, a refusal,
// transitions and reconciliation passes that changed the gateways.
#include "control/agent/agent_counters.h"

#include <map>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/common/exposition_samples.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using json = boost::json::object;

std::map<std::string, double> samples_of(const std::string& text) {
  return detwan::test_support::exposition_samples(text);
}

TEST_F(AgentFixture, EveryStatsCounterIsInTheExpositionWithTheSameValue) {
  auto r = request("a", "b", 50'000'000);
  r.provision = true;
  reserve_ok(r);
  EXPECT_FALSE(agent->reserve(request("a", "c", 10'000'000'000, 600 * kSecond, 7)).has_value());
  agent->reconcile_now();

  const json stats = agent->stats();
  const auto samples = samples_of(agent->metrics_text());
  size_t checked = 0;
  const auto expect_sample = [&](const std::string& series, uint64_t value) {
    SCOPED_TRACE(series);
    const auto it = samples.find(series);
    ASSERT_NE(it, samples.end()) << "not in the exposition";
    EXPECT_EQ(it->second, static_cast<double>(value));
    ++checked;
  };
  const json& counters = stats.at("counters").as_object();
  for (const agent::LabelledCounters& family : agent::kLabelledCounters) {
    const json& by_label = counters.at(family.key).as_object();
    EXPECT_FALSE(by_label.empty()) << family.key << ": the run counted nothing";
    for (const auto& [label, n] : by_label) {
      const std::string constant =
          family.const_label_name.empty()
              ? ""
              : fmt::format("{}=\"{}\",", family.const_label_name, family.const_label_value);
      expect_sample(fmt::format("{}{}{{{}{}=\"{}\"}}", agent::kAgentPrefix, family.metric, constant,
                                family.label, std::string(label)),
                    n.to_number<uint64_t>());
    }
  }
  expect_sample("detwan_agent_journal_commits_total",
                counters.at("journal_commits").to_number<uint64_t>());
  expect_sample("detwan_agent_journal_failures_total",
                counters.at("journal_failures").to_number<uint64_t>());
  expect_sample("detwan_agent_reservations_archived_total",
                counters.at("archived").to_number<uint64_t>());
  uint64_t applies = 0;
  for (const auto& g : stats.at("gateways").as_array()) {
    const json& entry = g.as_object();
    const std::string name(entry.at("name").as_string());
    for (const auto& f : agent::kReconcilerFields) {
      const uint64_t n = entry.at(f.key).to_number<uint64_t>();
      expect_sample(fmt::format("{}{}{{gateway=\"{}\"}}", agent::kGatewayPrefix, f.metric, name),
                    n);
      if (f.key == "applies") applies += n;
    }
  }
  EXPECT_EQ(applies, 2u);  // the reservation's two ends, one pass each
  EXPECT_GE(checked, 3u + 3u * std::size(agent::kReconcilerFields));
  EXPECT_GT(counters.at("refused").as_object().size(), 0u);
}

}  // namespace
}  // namespace detwan::control::testing
