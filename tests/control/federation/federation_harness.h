#pragma once
// Three owners' agents in one process (docs/federation.md): domain x (site a), the carrier w
// (borders only) and domain z (site c), each with its own topology, journal and HTTP server on
// 127.0.0.1, talking plain HTTP with per-peer bearer tokens; x's coordinator aggregates. One
// virtual clock for every agent and the coordinator; fake gateways.
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/json.hpp>

#include "common/clock.h"
#include "control/agent/agent.h"
#include "control/api/routes.h"
#include "control/client/http_client.h"
#include "control/federation/coordinator.h"
#include "tests/control/agent/agent_test_util.h"
#include "tests/control/agent/fake_gateway.h"

namespace detwan::control::testing {

inline const char* const kDomains[] = {"x", "w", "z"};

inline std::string topology_of(const std::string& domain, const std::string& journal,
                               const std::string& peers, const std::string& call_timeout = "2s",
                               const std::string& public_key = "") {
  // The domain's gateway's X25519 identity key (base64), when the test gives one.
  const std::string key_line =
      public_key.empty() ? "" : fmt::format("    public_key: \"{}\"\n", public_key);
  const std::string agent = fmt::format(
      "agent: {{name: {}, journal: {}, hold_timeout: 30s, provision_wait: 0s}}\n", domain, journal);
  const std::string federation = fmt::format(
      "federation:\n  hold_timeout: 10s\n  call_timeout: {}\n  peers:\n{}", call_timeout, peers);
  if (domain == "x") {
    return fmt::format(R"(domain: x
{}{}
borders: [{{name: a.ac1, domain: w}}]
sites: [{{name: a, gateway: gw-secret-a, tunnel_prefixes: [10.20.1.0/24]}}]
gateways:
  - name: gw-secret-a
    site: a
    admin_socket: /fake/x/gw-secret-a
{}    ports: [{{name: port-hidden-1, link: link-hidden-a}}]
    peers: [{{name: c, port: port-hidden-1, remote: gw-c}}]
nodes: [router-internal-x]
links:
  - {{name: link-hidden-a, ends: [a, router-internal-x], capacity: 1gbit, delay: 2ms, guard: 2us}}
  - {{name: link-hidden-b, ends: [router-internal-x, a.ac1], capacity: 1gbit, delay: 3ms}}
)",
                       agent, federation, key_line);
  }
  if (domain == "w") {
    return fmt::format(R"(domain: w
{}{}
borders: [{{name: a.ac1, domain: x}}, {{name: c.ac1, domain: z}}]
links:
  - {{name: ac1, ends: [a.ac1, c.ac1], capacity: 400mbit, delay: 10ms, jitter: 1ms}}
)",
                       agent, federation);
  }
  return fmt::format(R"(domain: z
{}{}
borders: [{{name: c.ac1, domain: w}}]
sites: [{{name: c, gateway: gw-c, tunnel_prefixes: [10.20.3.0/24]}}]
gateways:
  - name: gw-c
    site: c
    admin_socket: /fake/z/gw-c
{}    ports: [{{name: ac1, link: c-ac1}}]
    peers: [{{name: a, port: ac1, remote: gw-secret-a}}]
links:
  - {{name: c-ac1, ends: [c, c.ac1], capacity: 1gbit, delay: 1ms, guard: 2us}}
)",
                     agent, federation, key_line);
}

// A handler whose router is set (and reset, for a restart) after the server listens.
struct Slot {
  std::mutex mutex;
  api::Handler handler;
  // A slow agent: requests "METHOD path" (exact) wait this long before they are handled.
  std::string delay_request;
  int delay_ms = 0;
};

struct Domain {
  std::string name;
  std::string journal;
  std::shared_ptr<Slot> slot = std::make_shared<Slot>();
  std::unique_ptr<api::HttpServer> server;
  std::string url;
  std::unique_ptr<agent::Agent> agent;
  std::unique_ptr<federation::Coordinator> coordinator;  // x only
};

struct FederationFixture : ::testing::Test {
  TempDir dir;
  common::VirtualClock realtime{kStartNs};
  common::VirtualClock monotonic{1'000 * kSecond};
  FakeGateways gateways;
  std::map<std::string, Domain> domains;
  std::function<uint32_t()> draw_tunnel_id;  // x's coordinator's (default: random)
  std::string call_timeout = "2s";           // x's federation.call_timeout
  std::map<std::string, std::string> public_keys;  // domain -> its gateway's X25519 key (base64)

  static std::string token(const std::string& from, const std::string& to) {
    return fmt::format("token-{}-to-{}-0123456789abcdef", from, to);
  }
  std::string secret_file(const std::string& name, const std::string& content) {
    const std::string path = dir.path() + "/" + name;
    std::ofstream(path) << content << "\n";
    chmod(path.c_str(), 0600);
    return path;
  }

  void SetUp() override {
    for (const char* d : kDomains) {
      Domain& dom = domains[d];
      dom.name = d;
      dom.journal = dir.path() + "/" + d + ".db";
      api::HttpServerOptions options;
      options.listen = *common::parse_host_port("127.0.0.1:0", true);
      options.allow = {*common::parse_ip_prefix("127.0.0.0/8")};
      auto slot = dom.slot;
      auto server = api::HttpServer::start(options, [slot](api::HttpRequest r, api::Respond send) {
        api::Handler h;
        int delay_ms = 0;
        {
          std::lock_guard lock(slot->mutex);
          h = slot->handler;
          if (slot->delay_request == r.method + " " + r.path) delay_ms = slot->delay_ms;
        }
        if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        if (!h) {
          api::HttpResponse busy;
          busy.status = 503;
          busy.body = R"({"code":"restarting","message":"agent restarting"})";
          return send(busy);
        }
        h(std::move(r), std::move(send));
      });
      ASSERT_TRUE(server.has_value()) << server.error().message;
      dom.server = std::move(*server);
      dom.url = "http://" + common::format_host_port(dom.server->local_endpoint());
    }
    for (const char* d : kDomains) open(d);
  }

  void TearDown() override {
    for (auto& [name, d] : domains) {
      if (d.server) d.server->stop();
    }
  }

  std::string peers_of(const std::string& d) {
    std::string out;
    for (const std::string p : kDomains) {
      if (d == p) continue;
      out += fmt::format("    - {{domain: {}, url: {}, token_file: {}, accept_token_file: {}}}\n",
                         p, domains[p].url, secret_file(d + "-to-" + p, token(d, p)),
                         secret_file(p + "-to-" + d + ".accept", token(p, d)));
    }
    return out;
  }

  // Opens (or reopens on its journal) domain d's agent and, for x, its coordinator.
  void open(const std::string& d) {
    Domain& dom = domains[d];
    {
      std::lock_guard lock(dom.slot->mutex);
      dom.slot->handler = nullptr;
    }
    dom.coordinator.reset();
    dom.agent.reset();
    auto topology = model::load_topology_string(
        topology_of(d, dom.journal, peers_of(d), d == "x" ? call_timeout : "2s",
                    public_keys.count(d) != 0 ? public_keys.at(d) : ""),
        d + ".yaml");
    ASSERT_TRUE(topology.has_value()) << topology.error().message;
    agent::AgentOptions options;
    options.realtime = &realtime;
    options.monotonic = &monotonic;
    options.gateway_client = &gateways;
    options.start_threads = false;
    auto opened = agent::Agent::open(std::move(*topology), options);
    ASSERT_TRUE(opened.has_value()) << opened.error().message;
    dom.agent = std::move(*opened);
    if (d == "x") {
      federation::CoordinatorOptions c;
      c.realtime = &realtime;
      c.start_threads = false;
      c.draw_tunnel_id = draw_tunnel_id;
      auto coordinator = federation::Coordinator::open(*dom.agent, c);
      ASSERT_TRUE(coordinator.has_value()) << coordinator.error().message;
      dom.coordinator = std::move(*coordinator);
    }
    auto routes = api::make_federation_routes(*dom.agent, dom.coordinator.get());
    ASSERT_TRUE(routes.has_value()) << routes.error().message;
    std::lock_guard lock(dom.slot->mutex);
    dom.slot->handler = api::make_handler(*dom.agent, "", *routes);
  }

  federation::Coordinator& coordinator() { return *domains["x"].coordinator; }
  agent::Agent& agent_of(const std::string& d) { return *domains[d].agent; }

  // An HTTP call to domain d's API; "" token = none.
  std::pair<int, boost::json::object> http(const std::string& d, const std::string& method,
                                           const std::string& path, const std::string& body = "",
                                           const std::string& bearer = "") {
    auto url = client::parse_url(domains[d].url);
    auto answer = client::http_call(*url, method, path, body, bearer, 5000, "test");
    if (!answer) return {0, boost::json::object{{"error", answer.error().message}}};
    boost::system::error_code ec;
    auto v = boost::json::parse(answer->body, ec);
    return {answer->status, !ec && v.is_object() ? v.as_object() : boost::json::object{}};
  }

  static agent::ReserveRequest request(const std::string& id, bool commit = false) {
    agent::ReserveRequest r;
    r.spec.src = "a";
    r.spec.dst = "c";
    r.spec.min_bandwidth_bps = 50'000'000;
    r.spec.duration_ns = 600 * kSecond;
    r.spec.encrypt = "none";
    r.start_now = true;
    r.commit = commit;
    r.client_request_id = id;
    r.fingerprint = "a-c-50m-600s-none";
    return r;
  }

  // Reservations of domain d that still hold resources.
  size_t holding(const std::string& d) {
    size_t n = 0;
    for (const auto& r : agent_of(d).list(std::nullopt)) {
      const std::string state(r.at("state").as_string());
      if (state == "held" || state == "committed" || state == "provisioned" ||
          state == "released") {
        ++n;
      }
    }
    return n;
  }

  void tick_all() {
    for (const char* d : kDomains) agent_of(d).tick();
    coordinator().tick();
  }
};

}  // namespace detwan::control::testing
