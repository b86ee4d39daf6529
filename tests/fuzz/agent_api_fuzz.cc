// libFuzzer target for the control agent's HTTP API (control/api): the JSON request decoders
// (parse_reserve, parse_modify, parse_paths) and the whole route handler in front of an agent
// (two sites over fake gateways, virtual time, its SQLite journal in a temporary directory).
//
// The input is up to 8 requests, each ended by a NUL byte (the last one may end the input):
//   u8 method | u8 route | u8 flags | body
// method picks GET/POST/PATCH/DELETE/PUT; route picks one of the API's paths (reservation ids
// r-1..r-3, actions, queries) or, for route 255, takes the path from the body's first line;
// flags bit 0 advances virtual time 7 s and runs the agent's timers and reconciliation after
// the request. Invariants: every request is answered once, with a documented status (never a
// 5xx), JSON where the content type says so; refusals say why; the agent's ledger always
// matches its reservations (nothing booked twice, nothing leaked); the decoders, given the
// body directly, either parse it or name the problem.
//
// Built with libFuzzer by the fuzz build (tests/fuzz/meson.build, -Dfuzz=true) and with g++ as
// the corpus replay test fuzz_agent_api_corpus_test.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "tests/fuzz/fuzz_check.h"
#include "common/clock.h"
#include "control/agent/agent.h"
#include "control/api/requests.h"
#include "control/api/routes.h"
#include "control/model/topology.h"
#include "tests/control/agent/fake_gateway.h"


namespace detwan::control {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

const char* const kMethods[] = {"GET", "POST", "PATCH", "DELETE", "PUT"};
const char* const kRoutes[] = {
    "/v1/reservations",
    "/v1/reservations/r-1",
    "/v1/reservations/r-2",
    "/v1/reservations/r-1/commit",
    "/v1/reservations/r-1/provision",
    "/v1/reservations/r-2/provision",
    "/v1/reservations/r-1/release",
    "/v1/reservations/r-1/terminate",
    "/v1/reservations/r-3/abort",
    "/v1/reservations/r-1/rotate-key",
    "/v1/reservations?state=held",
    "/v1/reservations?state=active",
    "/v1/paths",
    "/v1/topology",
    "/healthz",
    "/metrics",
    "/v1/stats",
    "/v1/pools",
    "/v1/pools/a-cpu",
    "/v1/plan",
};

constexpr const char* kTopology = R"(domain: fuzz
agent:
  name: lab
  journal: {journal}
  hold_timeout: 30s
sites:
  - {name: a, gateway: gw-a, tunnel_prefixes: [10.20.1.0/24]}
  - {name: b, gateway: gw-b, tunnel_prefixes: [10.20.2.0/24]}
gateways:
  - name: gw-a
    site: a
    admin_socket: /fake/gw-a
    ports: [{name: ab1, link: ab1}, {name: ab2, link: ab2}]
    peers: [{name: b, port: ab1, gateway: gw-b}, {name: b-2, port: ab2, gateway: gw-b}]
  - name: gw-b
    site: b
    admin_socket: /fake/gw-b
    ports: [{name: ab1, link: ab1}, {name: ab2, link: ab2}]
    peers: [{name: a, port: ab1, gateway: gw-a}, {name: a-2, port: ab2, gateway: gw-a}]
links:
  - {name: ab1, ends: [a, b], capacity: 200mbit, delay: 5ms, guard: 2us}
  - {name: ab2, ends: [a, b], capacity: 100mbit, delay: 8ms, guard: 2us}
)";

// One temporary directory for the process (never freed: the exit handler that removes it
// runs after static destructors); each input gets a fresh journal file in it.
const std::string& temp_dir() {
  static const std::string* const dir = [] {
    // tmpfs when there is one: the journal's fsyncs would otherwise dominate each run.
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    auto* pattern = new std::string((base / "detwan-agent-fuzz-XXXXXX").string());
    FUZZ_CHECK(mkdtemp(pattern->data()) != nullptr);
    // The agent's info logs (one per journal opened) are noise here.
    if (std::getenv("DETWAN_FUZZ_VERBOSE") == nullptr) spdlog::set_level(spdlog::level::off);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(temp_dir(), ignored);
    });
    return pattern;
  }();
  return *dir;
}

void check_decoders(const std::string& body) {
  auto reserve = api::parse_reserve(body);
  if (!reserve) FUZZ_CHECK(reserve.error().status == 400 && !reserve.error().message.empty());
  auto modify = api::parse_modify(body);
  if (!modify) FUZZ_CHECK(modify.error().status == 400 && !modify.error().message.empty());
  auto paths = api::parse_paths(body);
  if (!paths) FUZZ_CHECK(paths.error().status == 400 && !paths.error().message.empty());
}

}  // namespace
}  // namespace detwan::control

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace detwan::control;  // NOLINT
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const std::string journal = temp_dir() + "/agent.db";
  std::error_code ignored;
  std::filesystem::remove(journal, ignored);
  std::string yaml = kTopology;
  yaml.replace(yaml.find("{journal}"), 9, journal);
  auto topology = model::load_topology_string(yaml);
  FUZZ_CHECK(topology.has_value());
  detwan::common::VirtualClock realtime{1'800'000'000'000'000'000};
  detwan::common::VirtualClock monotonic{1'000 * kSecond};
  testing::FakeGateways gateways;
  agent::AgentOptions options;
  options.realtime = &realtime;
  options.monotonic = &monotonic;
  options.gateway_client = &gateways;
  options.start_threads = false;
  auto opened = agent::Agent::open(std::move(*topology), options);
  FUZZ_CHECK(opened.has_value());
  std::unique_ptr<agent::Agent> agent = std::move(*opened);
  const api::Handler handler = api::make_handler(*agent, "openapi: 3.0.3\n");
  // 204: the operator console's /favicon.ico (reached by a path from the body, route 255).
  static const std::set<int> documented = {200, 201, 204, 400, 404, 405, 409, 422};
  // DETWAN_FUZZ_VERBOSE=1 prints every request and its status (to see what a seed reaches).
  static const bool verbose = std::getenv("DETWAN_FUZZ_VERBOSE") != nullptr;

  size_t start = 0;
  for (int n = 0; n < 8 && start < input.size(); ++n) {
    // The 3 header bytes may be anything (NUL included); the body ends at the next NUL.
    size_t end = start + 3 >= input.size() ? std::string_view::npos : input.find('\0', start + 3);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view record = input.substr(start, end - start);
    start = end + 1;
    if (record.size() < 3) continue;
    const auto method = static_cast<uint8_t>(record[0]);
    const auto route = static_cast<uint8_t>(record[1]);
    const auto flags = static_cast<uint8_t>(record[2]);
    std::string body(record.substr(3));
    check_decoders(body);

    api::HttpRequest request;
    request.method = kMethods[method % std::size(kMethods)];
    if (route == 255) {
      const size_t eol = body.find('\n');
      request.target = body.substr(0, eol);
      body = eol == std::string::npos ? "" : body.substr(eol + 1);
    } else {
      request.target = kRoutes[route % std::size(kRoutes)];
    }
    const size_t q = request.target.find('?');
    request.path = request.target.substr(0, q);
    // Never wait for the (fake) dataplane: nothing runs the agent's threads here.
    request.query =
        q == std::string::npos ? "wait=false" : request.target.substr(q + 1) + "&wait=false";
    request.body = body;
    request.content_type = "application/json";
    request.client = "127.0.0.1:40000";

    int answers = 0;
    api::HttpResponse answer;
    handler(request, [&](api::HttpResponse r) {
      answer = std::move(r);
      ++answers;
    });
    FUZZ_CHECK(answers == 1);
    if (verbose) {
      std::fprintf(stderr, "agent_api_fuzz: %s %s -> %d\n", request.method.c_str(),
                   request.target.c_str(), answer.status);
    }
    if (documented.count(answer.status) == 0) {
      std::fprintf(stderr, "agent_api_fuzz: %s %s -> %d %s\n", request.method.c_str(),
                   request.target.c_str(), answer.status, answer.body.c_str());
      FUZZ_CHECK(documented.count(answer.status) == 1);
    }
    if (answer.content_type == "application/json") {
      boost::system::error_code ec;
      const boost::json::value v = boost::json::parse(answer.body, ec);
      FUZZ_CHECK(!ec);
      if (answer.status >= 400) {
        // Refusals carry an error object with a message naming the problem.
        FUZZ_CHECK(v.is_object());
      }
    }
    if ((flags & 1) != 0) {
      realtime.advance_ns(7 * kSecond);
      monotonic.advance_ns(7 * kSecond);
      agent->tick();
      agent->reconcile_now();
    }
    FUZZ_CHECK(agent->check_ledger().empty());
  }
  return 0;
}
