// stats_json() parses and carries the counters the run produced; prometheus_text() is well-formed
// text exposition 0.0.4 (every line parses, families are grouped and unique, counters end in
// _total, summaries carry the documented quantiles) and agrees with the engine's counters.
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "common/prometheus.h"
#include "dataplane/gw/control_server.h"
#include "tests/dataplane/gw/exposition_parse.h"
#include "tests/dataplane/gw/engine_sim_util.h"
#include "tests/dataplane/gw/engine_test_util.h"

namespace detwan::dataplane::gw {
namespace {

namespace json = boost::json;
using common::Status;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers
using namespace testing_exposition;  // NOLINT(google-build-using-namespace): the parser

// A run with traffic in both directions, policing, best effort, a few drops of every kind.
struct StatsRun {
  std::unique_ptr<loopback::Gateway> g;
  std::shared_ptr<uint64_t> delivered_at_b_7 = std::make_shared<uint64_t>(0);
  uint64_t no_route = 0;
};

StatsRun make_run(const std::string& name_a = "site-a") {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  std::vector<loopback::EngineSpec> specs = {{site_config(0, o), 0}, {site_config(1, o), 0}};
  specs[0].config.name = name_a;
  loopback::Options options;
  options.start_ns = kStartNs;
  options.capture_deliveries = false;
  auto created = loopback::Gateway::create(std::move(specs), options);
  EXPECT_TRUE(created.has_value());
  StatsRun run{std::move(*created)};
  loopback::Gateway& g = *run.g;
  g.set_default_faults({.delay_ns = 1 * kMs});
  g.set_delivery_observer([count = run.delivered_at_b_7](const loopback::Delivery& d) {
    if (d.engine == 1 && d.tunnel_id == 7 && !d.best_effort) ++*count;
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 500e6));   // tunnel 7, policed
  flows.push_back(flow(0, 102, 80, 2, 20e6));  // best effort on behalf of tunnel 9
  flows.push_back(flow(1, 1, 80, 3, 10e6));    // back
  drive(g, flows, kStartNs + 100 * kMs);
  const uint8_t nowhere[4] = {192, 168, 1, 1};
  for (int i = 0; i < 4; ++i) {
    if (g.inject_tun(0, ipv4_packet(nowhere, 1, 100, {})) == Status::kDropped) ++run.no_route;
  }
  g.inject_wan(1, 0, g.engine(0).config().wan_ports[0].local, Bytes(10));
  g.run_until(kStartNs + 110 * kMs);
  return run;
}

TEST(EngineStats, JsonParsesAndCarriesTheCounters) {
  StatsRun run = make_run();
  loopback::Gateway& g = *run.g;
  const Engine& a = g.engine(0);
  const Engine& b = g.engine(1);
  const int64_t now = g.engine_now_ns(0);
  json::value doc = json::parse(a.stats_json(now));
  const json::object& root = doc.as_object();
  EXPECT_EQ(root.at("gateway").as_string(), "site-a");
  EXPECT_EQ(root.at("uptime_ns").to_number<int64_t>(), 110 * kMs);
  const json::object& drops = root.at("drops").as_object();
  EXPECT_EQ(drops.size(), static_cast<std::size_t>(kEngineDropCount));
  EXPECT_EQ(drops.at("no_route").to_number<uint64_t>(), run.no_route);
  EXPECT_EQ(run.no_route, 4u);

  const json::object& port = root.at("ports").at(0).as_object();
  EXPECT_EQ(port.at("name").as_string(), "wan1");
  EXPECT_EQ(port.at("max_payload_bytes").to_number<uint32_t>(), 1432u);
  EXPECT_EQ(port.at("io").at("tx_packets").to_number<uint64_t>(),
            const_cast<Engine&>(a).port_io(0).tx_packets);
  EXPECT_EQ(port.at("rx_drops").as_object().size(), wire::kDropReasonCount);
  const json::value& tx = port.at("tx");
  EXPECT_EQ(tx.at("port").at("sent_packets").to_number<uint64_t>(),
            a.scheduler(0).port_counters().sent_packets);
  EXPECT_GT(tx.at("best_effort").at("sent_packets").to_number<uint64_t>(), 0u);

  const json::object& t7 = root.at("tunnels").at(0).as_object();
  EXPECT_EQ(t7.at("id").to_number<uint32_t>(), 7u);
  EXPECT_EQ(t7.at("peer").as_string(), "site-b");
  EXPECT_EQ(t7.at("port").as_string(), "wan1");
  EXPECT_EQ(t7.at("rate_bps").to_number<uint64_t>(), kRate7Bps);
  EXPECT_EQ(t7.at("slots").as_string(), "0-7");
  EXPECT_EQ(t7.at("bound_ns").to_number<int64_t>(), 5 * kMs);
  const json::value& t7tx = t7.at("tx");
  const uint64_t policed = t7tx.at("scheduler").at("dropped").at("policed").to_number<uint64_t>();
  EXPECT_GT(policed, 0u);
  EXPECT_EQ(policed,
            a.scheduler(0).tunnel_counters(7)->dropped[static_cast<int>(sched::TxDrop::kPoliced)]);
  EXPECT_EQ(t7tx.at("next_sequence").to_number<uint64_t>(),
            t7tx.at("sent_on_time_packets").to_number<uint64_t>() +
                t7tx.at("sent_best_effort_packets").to_number<uint64_t>());
  const json::object& t9 = root.at("tunnels").at(1).as_object();
  EXPECT_GT(t9.at("tx").at("best_effort_offered_packets").to_number<uint64_t>(), 0u);

  // Site b's view of tunnel 7: what it accepted and released on time.
  json::value doc_b = json::parse(b.stats_json(g.engine_now_ns(1)));
  const json::value& rx = doc_b.at("tunnels").at(0).at("rx");
  EXPECT_EQ(rx.at("on_time").at("released_packets").to_number<uint64_t>(), *run.delivered_at_b_7);
  EXPECT_EQ(rx.at("accepted_on_time_packets").to_number<uint64_t>(),
            rx.at("on_time").at("received_packets").to_number<uint64_t>());
  EXPECT_EQ(rx.at("on_time").at("one_way_delay_ns").at("max").to_number<int64_t>(), 5 * kMs);
  EXPECT_EQ(rx.at("replay_drops").at("duplicate").to_number<uint64_t>(), 0u);
  EXPECT_TRUE(rx.at("replay_top").is_number());
  EXPECT_EQ(doc_b.at("ports").at(0).at("rx_drops").at("too_short").to_number<uint64_t>(), 1u);

  const json::object& peer = root.at("peers").at(0).as_object();
  EXPECT_EQ(peer.at("name").as_string(), "site-b");
  EXPECT_EQ(peer.at("state").as_string(), "up");
  EXPECT_EQ(peer.at("control_tunnel").to_number<uint32_t>(), 7u);
  EXPECT_GE(peer.at("last_rx_age_ns").to_number<int64_t>(), 0);
  const json::object& clock = peer.at("clock").as_object();
  EXPECT_EQ(clock.at("source").as_string(), "configured");
  EXPECT_EQ(clock.at("offset_ns").to_number<int64_t>(), 0);
  EXPECT_GE(clock.at("samples").to_number<uint64_t>(), 10u);
  EXPECT_EQ(clock.at("rtt_ns").to_number<int64_t>(), 2 * kMs);
  EXPECT_EQ(clock.at("estimated_offset_ns").to_number<int64_t>(), 0);
  EXPECT_GE(peer.at("keepalive").at("received").to_number<uint64_t>(), 20u);
  // Requests every 10 ms from 0 to 110 ms each way, 1 ms per direction: the last ones are still
  // on the way.
  EXPECT_EQ(peer.at("time_exchange").at("requests_sent").to_number<uint64_t>(), 12u);
  EXPECT_EQ(peer.at("time_exchange").at("responses_received").to_number<uint64_t>(), 11u);
  EXPECT_EQ(peer.at("time_exchange").at("requests_received").to_number<uint64_t>(), 11u);
  EXPECT_EQ(peer.at("time_exchange").at("responses_sent").to_number<uint64_t>(), 11u);
  EXPECT_GT(root.at("local").at("tun_rx_packets").to_number<uint64_t>(), 1000u);
}

TEST(EngineStats, JsonStaysValidWithHostileNamesAndBeforeAnyTraffic) {
  GatewayConfig c = site_config(0);
  c.name = "we\"ird\\name\n\x01";
  c.peers[0].name = "p\"eer";
  c.tunnels[0].peer = c.tunnels[1].peer = c.peers[0].name;
  auto e = Engine::create(c, kStartNs);
  ASSERT_TRUE(e.has_value()) << e.error().describe();
  const json::value doc = json::parse((*e)->stats_json(kStartNs));
  EXPECT_EQ(doc.at("gateway").as_string(), c.name);
  EXPECT_EQ(doc.at("peers").at(0).at("state").as_string(), "down");
  EXPECT_TRUE(doc.at("peers").at(0).at("last_rx_age_ns").is_null());
  EXPECT_TRUE(doc.at("peers").at(0).at("clock").at("rtt_ns").is_null());
  EXPECT_EQ(doc.at("peers").at(0).at("clock").at("source").as_string(), "auto");
  EXPECT_TRUE(doc.at("tunnels").at(0).at("rx").at("replay_top").is_null());
  const std::string text = (*e)->prometheus_text(kStartNs);
  EXPECT_NE(text.find("detwan_gw_info{gateway=\"we\\\"ird\\\\name\\n\x01\"} 1"), std::string::npos)
      << text.substr(0, 300);
}

TEST(EngineStats, PrometheusTextIsWellFormedAndAgreesWithTheCounters) {
  StatsRun run = make_run();
  const Engine& a = run.g->engine(0);
  const std::string text = a.prometheus_text(run.g->engine_now_ns(0));
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  std::istringstream in(text);
  std::string line;
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helped, samples, closed;
  // histogram series -> its buckets in order (le text, cumulative count)
  std::map<std::string, std::vector<std::pair<std::string, double>>> buckets;
  std::string family;  // current group
  std::map<std::string, double> values;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    SCOPED_TRACE("line " + std::to_string(line_number) + ": " + line);
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(helped.insert(name).second) << "HELP twice";
      EXPECT_GT(line.size(), 8 + name.size()) << "empty help";
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << type;
      EXPECT_TRUE(helped.contains(name)) << "TYPE without HELP before it";
      EXPECT_TRUE(types.emplace(name, type).second) << "TYPE twice: " << name;
      if (!family.empty()) closed.insert(family);
      family = name;
      if (type == "counter") {
        EXPECT_TRUE(name.ends_with("_total")) << name;
      }
      continue;
    }
    const auto s = parse_sample(line);
    ASSERT_TRUE(s.has_value()) << "does not parse";
    ASSERT_FALSE(family.empty()) << "sample before any TYPE";
    const std::string& type = types.at(family);
    if (type == "histogram") {
      EXPECT_TRUE(s->name == family + "_bucket" || s->name == family + "_sum" ||
                  s->name == family + "_count")
          << "not in family " << family;
      if (s->name == family + "_bucket") {
        buckets[key_of(*s, true)].emplace_back(s->labels.at("le"), s->value);
      }
    } else {
      EXPECT_EQ(s->name, family) << "sample outside its family's group";
    }
    EXPECT_TRUE(samples.insert(key_of(*s)).second) << "duplicate series";
    if (!s->name.ends_with("_sum")) {
      EXPECT_GE(s->value, 0) << "no count here can be negative";
    }
    values[key_of(*s)] = s->value;
  }
  EXPECT_GT(types.size(), 60u);
  // Every histogram: one of the two documented bucket sets, cumulative, +Inf last and equal to
  // its _count.
  std::vector<std::string> delay_les, error_les;
  for (const double b : common::prometheus::kDelayBucketsSeconds) {
    delay_les.push_back(fmt::format("{}", b));
  }
  for (const double b : common::prometheus::kErrorBucketsSeconds) {
    error_les.push_back(fmt::format("{}", b));
  }
  delay_les.push_back("+Inf");
  error_les.push_back("+Inf");
  EXPECT_GT(buckets.size(), 10u);
  for (const auto& [series, list] : buckets) {
    SCOPED_TRACE(series);
    std::vector<std::string> les;
    for (const auto& [le, count] : list) les.push_back(le);
    EXPECT_TRUE(les == delay_les || les == error_les);
    for (size_t i = 1; i < list.size(); ++i) EXPECT_GE(list[i].second, list[i - 1].second);
    std::string count_key = series;
    count_key.replace(count_key.find("_bucket"), 7, "_count");
    EXPECT_EQ(list.back().second, values.at(count_key));
  }
  for (const auto& [name, type] : types) {
    if (type == "histogram") {
      EXPECT_FALSE(types.contains(name + "_bucket")) << name;
      EXPECT_FALSE(types.contains(name + "_count")) << name;
    }
  }

  EXPECT_EQ(values.at("detwan_gw_engine_drops_total|reason=no_route"), 4.0);
  EXPECT_EQ(values.at("detwan_gw_info|gateway=site-a"), 1.0);
  EXPECT_EQ(
      values.at("detwan_gw_tunnel_tx_drops_total|port=wan1|reason=policed|tunnel=7"),
      static_cast<double>(
          a.scheduler(0).tunnel_counters(7)->dropped[static_cast<int>(sched::TxDrop::kPoliced)]));
  EXPECT_EQ(values.at("detwan_gw_port_tx_sent_packets_total|port=wan1"),
            static_cast<double>(a.scheduler(0).port_counters().sent_packets));
  EXPECT_EQ(values.at("detwan_gw_peer_up|peer=site-b"), 1.0);
  // Virtual time: every frame leaves exactly at its slot, so all are in the first bucket.
  EXPECT_EQ(values.at("detwan_gw_port_tx_departure_error_seconds_bucket|le=1e-06|port=wan1"),
            static_cast<double>(a.scheduler(0).port_counters().sent_packets));
  EXPECT_EQ(values.at("detwan_gw_port_tx_departure_error_seconds_count|port=wan1"),
            static_cast<double>(a.scheduler(0).port_counters().sent_packets));
  const std::string b_text = run.g->engine(1).prometheus_text(run.g->engine_now_ns(1));
  // Every on-time packet is released exactly at its 5 ms bound: all at or below le=0.005,
  // none at or below le=0.0025.
  const std::string series =
      "detwan_gw_tunnel_rx_one_way_delay_seconds_bucket{tunnel=\"7\",port=\"wan1\","
      "class=\"on_time\",le=\"";
  const size_t at = b_text.find(series + "0.005\"} ");
  ASSERT_NE(at, std::string::npos);
  const size_t count_at = b_text.find(
      "detwan_gw_tunnel_rx_one_way_delay_seconds_count{tunnel=\"7\",port=\"wan1\","
      "class=\"on_time\"} ");
  ASSERT_NE(count_at, std::string::npos);
  const auto number_after = [&](size_t pos) {
    const size_t space = b_text.find(' ', b_text.find('}', pos));
    return std::stod(b_text.substr(space + 1, b_text.find('\n', space) - space - 1));
  };
  EXPECT_GT(number_after(count_at), 0.0);
  EXPECT_EQ(number_after(at), number_after(count_at));
  EXPECT_NE(b_text.find(series + "0.0025\"} 0\n"), std::string::npos);
  EXPECT_NE(
      b_text.find("detwan_gw_port_rx_wire_drops_total{port=\"wan1\",reason=\"too_short\"} 1\n"),
      std::string::npos);
}


// The HTTP exporter builds the exposition in parts (Engine::PrometheusPart, one control poll
// each); joined by family they are the whole exposition, line for line, each family once.
TEST(EnginePrometheusParts, PartsJoinedAreTheWholeExposition) {
  auto engine = Engine::create(testing::many_tunnels_config(120), 1'000'000'000'000);
  ASSERT_TRUE(engine.has_value()) << engine.error().message;
  const std::vector<Engine*> shards{engine->get()};
  const int64_t now = 1'000'000'000'000;
  const std::string whole = Engine::prometheus_text(shards, now);
  std::vector<std::string> parts;
  int64_t after = -1;
  int rounds = 0;
  do {
    const std::string request = fmt::format(
        R"({{"cmd":"prometheus","part":{{"head":{},"after_tunnel":{},"max_tunnels":50}}}})",
        after < 0 ? "true" : "false", after);
    std::string text = prometheus_answer(shards, request, now);
    ASSERT_NE(text.rfind("{\"error\"", 0), 0u) << text;
    after = -1;
    if (const size_t at = text.rfind(kPrometheusMore); at != std::string::npos) {
      after = std::stoll(text.substr(at + kPrometheusMore.size()));
      text.resize(at);
    }
    parts.push_back(std::move(text));
  } while (after >= 0 && ++rounds < 10);
  EXPECT_EQ(parts.size(), 3u);  // 50 + 50 + 20 tunnels
  const std::string merged = common::prometheus::merge(parts);
  const auto lines_of = [](const std::string& text) {
    std::multiset<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.insert(line);
    return lines;
  };
  EXPECT_EQ(lines_of(merged), lines_of(whole));
  std::set<std::string> typed;
  std::istringstream in(merged);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      EXPECT_TRUE(typed.insert(line).second) << line;
    }
  }
  // Malformed parts are refused naming the field.
  EXPECT_NE(prometheus_answer(shards, R"({"cmd":"prometheus","part":{"max_tunnels":0}})", now)
                .find("part.max_tunnels"),
            std::string::npos);
  EXPECT_NE(prometheus_answer(shards, R"({"cmd":"prometheus","bogus":1})", now).find("bogus"),
            std::string::npos);
}

}  // namespace
}  // namespace detwan::dataplane::gw
