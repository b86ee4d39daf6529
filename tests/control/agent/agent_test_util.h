#pragma once
// A two-site agent over fake gateways, in virtual time, with its journal in a temp directory.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "common/clock.h"
#include "control/agent/agent.h"
#include "tests/control/agent/fake_gateway.h"

namespace detwan::control::testing {

inline constexpr int64_t kStartNs = 1'800'000'000'000'000'000;  // a Unix time in 2027
inline constexpr int64_t kSecond = 1'000'000'000;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "detwan-agent-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sites a and b joined by link ab1 (200 Mbit/s, 5 ms, 90 % reservable) and, through transit
// node r, by links ar and rb (1 Gbit/s, 20 ms each); site c reached from a by link ac.
inline std::string lab_topology(const std::string& journal, const std::string& extra_agent = "") {
  return fmt::format(R"(domain: test
agent:
  name: lab
  journal: {}
  hold_timeout: 30s
{}
sites:
  - {{name: a, gateway: gw-a, tunnel_prefixes: [10.20.1.0/24]}}
  - {{name: b, gateway: gw-b, tunnel_prefixes: [10.20.2.0/24]}}
  - {{name: c, gateway: gw-c, tunnel_prefixes: [10.20.3.0/24]}}
gateways:
  - name: gw-a
    site: a
    admin_socket: /fake/gw-a
    ports: [{{name: ab1, link: ab1}}, {{name: ar, link: ar}}, {{name: ac, link: ac}}]
    peers: [{{name: b, port: ab1, gateway: gw-b}}, {{name: b-2, port: ar, gateway: gw-b}},
            {{name: c, port: ac, gateway: gw-c}}]
  - name: gw-b
    site: b
    admin_socket: /fake/gw-b
    ports: [{{name: ab1, link: ab1}}, {{name: rb, link: rb}}]
    peers: [{{name: a, port: ab1, gateway: gw-a}}, {{name: a-2, port: rb, gateway: gw-a}}]
  - name: gw-c
    site: c
    admin_socket: /fake/gw-c
    ports: [{{name: ac, link: ac}}]
    peers: [{{name: a, port: ac, gateway: gw-a}}]
nodes: [r]
links:
  - {{name: ab1, ends: [a, b], capacity: 200mbit, delay: 5ms, guard: 2us}}
  - {{name: ar, ends: [a, r], capacity: 1gbit, delay: 20ms, guard: 2us}}
  - {{name: rb, ends: [r, b], capacity: 1gbit, delay: 20ms, guard: 2us}}
  - {{name: ac, ends: [a, c], capacity: 100mbit, delay: 1ms, jitter: 500us, guard: 2us}}
)",
                     journal, extra_agent);
}

struct AgentFixture : ::testing::Test {
  TempDir dir;
  std::string journal = dir.path() + "/agent.db";
  common::VirtualClock realtime{kStartNs};
  common::VirtualClock monotonic{1'000 * kSecond};
  FakeGateways gateways;
  std::unique_ptr<agent::Agent> agent;
  std::string extra_agent;  // more lines of the topology's agent: section

  void SetUp() override { open(); }

  void open() {
    agent.reset();
    auto topology = model::load_topology_string(lab_topology(journal, extra_agent));
    ASSERT_TRUE(topology.has_value()) << topology.error().message;
    agent::AgentOptions options;
    options.realtime = &realtime;
    options.monotonic = &monotonic;
    options.gateway_client = &gateways;
    options.start_threads = false;
    auto opened = agent::Agent::open(std::move(*topology), options);
    ASSERT_TRUE(opened.has_value()) << opened.error().message;
    agent = std::move(*opened);
  }

  // host: 0 = the sites' whole tunnel prefixes, else one host address per site (10.20.i.host),
  // so several reservations may join the same two sites.
  static agent::ReserveRequest request(const std::string& src, const std::string& dst,
                                       uint64_t rate_bps, int64_t duration_ns = 600 * kSecond,
                                       int host = 0) {
    agent::ReserveRequest r;
    if (host != 0) {
      auto site = [](const std::string& s) { return s == "a" ? 1 : s == "b" ? 2 : 3; };
      r.spec.src_prefixes = {fmt::format("10.20.{}.{}/32", site(src), host)};
      r.spec.dst_prefixes = {fmt::format("10.20.{}.{}/32", site(dst), host)};
    }
    r.spec.src = src;
    r.spec.dst = dst;
    r.spec.min_bandwidth_bps = rate_bps;
    r.spec.duration_ns = duration_ns;
    r.start_now = true;
    r.fingerprint = fmt::format("{}-{}-{}-{}", src, dst, rate_bps, duration_ns);
    return r;
  }

  boost::json::object reserve_ok(agent::ReserveRequest r) {
    auto out = agent->reserve(r);
    EXPECT_TRUE(out.has_value()) << (out ? "" : out.error().message);
    return out ? *out : boost::json::object{};
  }

  static std::string id_of(const boost::json::object& r) {
    return std::string(r.at("id").as_string());
  }
  static std::string state_of(const boost::json::object& r) {
    return std::string(r.at("state").as_string());
  }
  std::string state(const std::string& id) { return state_of(*agent->get(id)); }
  bool active(const std::string& id) {
    return agent->get(id)->at("dataplane").as_object().at("active").as_bool();
  }
  size_t tunnels_on(const std::string& socket) {
    return gateways.with(socket, [](FakeGateways::Gateway& g) { return g.tunnels.size(); });
  }
  boost::json::object tunnel_on(const std::string& socket, uint32_t id) {
    return gateways.with(socket, [&](FakeGateways::Gateway& g) {
      const auto it = g.tunnels.find(id);
      return it == g.tunnels.end() ? boost::json::object{} : it->second;
    });
  }
};

}  // namespace detwan::control::testing
