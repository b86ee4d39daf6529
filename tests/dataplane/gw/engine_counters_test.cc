// The counter registry (dataplane/gw/engine_counters.h and the sched tables): every counter of
// every table appears in stats_json() under its key and in prometheus_text() under its family,
// with the same value, on both gateways of an authenticated pair that carried traffic.
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/gw/engine_counters.h"
#include "tests/dataplane/gw/engine_sim_util.h"
#include "tests/dataplane/gw/engine_test_util.h"
#include "tests/dataplane/gw/exposition_parse.h"

namespace detwan::dataplane::gw {
namespace {

namespace json = boost::json;
using namespace testing;             // NOLINT(google-build-using-namespace): test helpers
using namespace testing_exposition;  // NOLINT(google-build-using-namespace): the parser

using Labels = std::map<std::string, std::string>;

// The exposition's samples by key_of (name|label=value|...).
std::map<std::string, double> samples_of(const std::string& text) {
  std::map<std::string, double> values;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto s = parse_sample(line);
    EXPECT_TRUE(s.has_value()) << line;
    if (s) values[key_of(*s)] = s->value;
  }
  return values;
}

// Walks every field of a table and compares the JSON object's value with the exposition's.
struct Checker {
  const std::map<std::string, double>& samples;
  size_t checked = 0;
  uint64_t total = 0;  // sum of the values checked (the run must have counted something)

  template <typename C, size_t N>
  void check(const json::object& object, std::string_view prefix, const Labels& labels,
             const common::CounterField<C> (&fields)[N], const std::string& where) {
    for (const common::CounterField<C>& f : fields) {
      SCOPED_TRACE(fmt::format("{}: key {} metric {}{}", where, f.key, prefix, f.metric));
      const json::object* in = &object;
      std::string_view key = f.key;
      if (const size_t dot = key.find('.'); dot != std::string_view::npos) {
        const json::value* inner = in->if_contains(key.substr(0, dot));
        ASSERT_NE(inner, nullptr) << "no JSON object " << key.substr(0, dot);
        ASSERT_TRUE(inner->is_object());
        in = &inner->as_object();
        key = key.substr(dot + 1);
      }
      const json::value* value = in->if_contains(key);
      ASSERT_NE(value, nullptr) << "not in stats";
      ASSERT_TRUE(value->is_number());
      Sample sample;
      sample.name = fmt::format("{}{}", prefix, f.metric);
      sample.labels = labels;
      if (!f.label_name.empty()) sample.labels[std::string(f.label_name)] = f.label_value;
      const auto it = samples.find(key_of(sample));
      ASSERT_NE(it, samples.end()) << "not in the exposition: " << key_of(sample);
      const auto counted = value->to_number<uint64_t>();
      EXPECT_EQ(it->second, static_cast<double>(counted));
      ++checked;
      total += counted;
    }
  }
};

TEST(EngineCounters, EveryCounterIsInStatsAndExpositionWithTheSameValue) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  TunnelAuth auth;
  auth.keys.push_back(TunnelKey{1, *aead::key_from_hex(std::string(64, '1'))});
  auth.tx_key = 1;
  o.auth = auth;
  std::vector<loopback::EngineSpec> specs = {{site_config(0, o), 0}, {site_config(1, o), 0}};
  loopback::Options options;
  options.start_ns = kStartNs;
  options.capture_deliveries = false;
  auto created = loopback::Gateway::create(std::move(specs), options);
  ASSERT_TRUE(created.has_value());
  loopback::Gateway& g = **created;
  g.set_default_faults({.delay_ns = 1 * kMs});
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 500e6));   // tunnel 7, policed
  flows.push_back(flow(0, 102, 80, 2, 20e6));  // best effort on behalf of tunnel 9
  flows.push_back(flow(1, 1, 80, 3, 10e6));    // back
  drive(g, flows, kStartNs + 100 * kMs);
  g.run_until(kStartNs + 110 * kMs);

  for (uint32_t engine = 0; engine < 2; ++engine) {
    SCOPED_TRACE(fmt::format("engine {}", engine));
    const int64_t now_ns = g.engine_now_ns(engine);
    const json::object stats = json::parse(g.engine(engine).stats_json(now_ns)).as_object();
    const auto samples = samples_of(g.engine(engine).prometheus_text(now_ns));
    Checker c{samples};
    size_t expected = 0;

    c.check(stats.at("local").as_object(), kLocalIoPrefix, {}, kLocalIoFields, "local");
    c.check(stats.at("control").as_object(), kControlIoPrefix, {}, kControlIoFields, "control");
    expected += std::size(kLocalIoFields) + std::size(kControlIoFields);
    for (const json::value& port : stats.at("ports").as_array()) {
      const json::object& p = port.as_object();
      const Labels labels{{"port", std::string(p.at("name").as_string())}};
      c.check(p.at("io").as_object(), kPortIoPrefix, labels, kPortIoFields, "port io");
      const json::object& tx = p.at("tx").as_object();
      c.check(tx.at("port").as_object(), "detwan_gw_port_tx_", labels, sched::kTxCounterFields,
              "port tx");
      c.check(tx.at("best_effort").as_object(), "detwan_gw_best_effort_tx_", labels,
              sched::kTxCounterFields, "best effort tx");
      expected += std::size(kPortIoFields) + 2 * std::size(sched::kTxCounterFields);
    }
    size_t authenticated = 0;
    for (const json::value& tunnel : stats.at("tunnels").as_array()) {
      const json::object& t = tunnel.as_object();
      const std::string where = fmt::format("tunnel {}", t.at("id").as_int64());
      const Labels labels{{"tunnel", std::to_string(t.at("id").as_int64())},
                          {"port", std::string(t.at("port").as_string())}};
      const json::object& tx = t.at("tx").as_object();
      const json::object& rx = t.at("rx").as_object();
      c.check(tx, kTunnelPrefix, labels, kTunnelTxFields, where);
      c.check(rx, kTunnelPrefix, labels, kTunnelRxFields, where);
      c.check(tx.at("scheduler").as_object(), "detwan_gw_tunnel_tx_", labels,
              sched::kTxCounterFields, where + " scheduler");
      for (const char* cls : {"on_time", "best_effort"}) {
        Labels with_class = labels;
        with_class["class"] = cls;
        c.check(rx.at(cls).as_object(), "detwan_gw_tunnel_rx_", with_class,
                sched::kPlayoutCounterFields, where + " " + cls);
      }
      expected += std::size(kTunnelTxFields) + std::size(kTunnelRxFields) +
                  std::size(sched::kTxCounterFields) + 2 * std::size(sched::kPlayoutCounterFields);
      ASSERT_TRUE(t.at("auth").is_object());
      c.check(t.at("auth").as_object(), kAuthPrefix, labels, kAuthFields, where + " auth");
      expected += std::size(kAuthFields);
      ++authenticated;
    }
    EXPECT_EQ(authenticated, 2u);
    for (const json::value& peer : stats.at("peers").as_array()) {
      const json::object& p = peer.as_object();
      c.check(p, kPeerPrefix, {{"peer", std::string(p.at("name").as_string())}}, kPeerFields,
              "peer");
      expected += std::size(kPeerFields);
    }
    EXPECT_EQ(c.checked, expected);
    EXPECT_GT(c.checked, 150u);
    EXPECT_GT(c.total, 1000u) << "the run counted nothing";
  }
}

// A table's sum is the sum of every field (the shards' exposition adds tables this way).
TEST(EngineCounters, AddCountersAddsEveryField) {
  PortIo a, b;
  uint64_t n = 1;
  for (const auto& f : kPortIoFields) {
    a.*f.member = n;
    b.*f.member = 100 * n++;
  }
  common::add_counters(a, b, kPortIoFields);
  n = 1;
  for (const auto& f : kPortIoFields) EXPECT_EQ(a.*f.member, 101 * n++) << f.key;
  // The table names each member once (two entries for one member would be summed twice above).
  for (size_t i = 0; i < std::size(kPeerFields); ++i) {
    for (size_t j = i + 1; j < std::size(kPeerFields); ++j) {
      EXPECT_NE(kPeerFields[i].member, kPeerFields[j].member) << kPeerFields[i].key;
      EXPECT_NE(kPeerFields[i].key, kPeerFields[j].key);
    }
  }
}

}  // namespace
}  // namespace detwan::dataplane::gw
