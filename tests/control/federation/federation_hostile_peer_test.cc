// A peer is another owner's agent: nothing it answers or sends may throw out of the federation
// code (docs/federation.md, "A peer's malformed answer"; docs/errors.md). A malformed answer is
// 502 peer_protocol naming the domain and the field, counted, and handled like a failed call
// (what was held is aborted, a failed commit compensated); a malformed request from a peer is
// 400 naming the field; an unreadable journal row is skipped at open while the others recover.
// Every case ends with no segment held at any domain (or only the ones meant to stay).
#include <functional>

#include <boost/json.hpp>

#include "tests/control/federation/federation_harness.h"

namespace detwan::control::testing {
namespace {

namespace json = boost::json;

std::string str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

struct HostilePeerTest : FederationFixture {
  using Match = std::function<bool(const api::HttpRequest&)>;
  using Rewrite = std::function<std::string(const std::string&)>;

  // Domain d handles every request as before, but answers the ones `match` picks with the
  // body `rewrite` makes of its real answer: the peer did the work and then said it wrongly.
  void mangle(const std::string& d, Match match, Rewrite rewrite) {
    Slot& slot = *domains[d].slot;
    std::lock_guard lock(slot.mutex);
    api::Handler real = slot.handler;
    slot.handler = [real, match, rewrite](api::HttpRequest r, api::Respond send) {
      const bool hit = match(r);
      real(std::move(r), [hit, rewrite, send](api::HttpResponse answer) {
        if (hit) answer.body = rewrite(answer.body);
        send(std::move(answer));
      });
    };
  }
  // Sets one field of the answer (a path of keys into nested objects).
  static Rewrite set_field(std::vector<std::string> keys, json::value v) {
    return [keys, v](const std::string& body) {
      json::value parsed = json::parse(body);
      json::object* o = &parsed.as_object();
      for (size_t i = 0; i + 1 < keys.size(); ++i) o = &(*o)[keys[i]].as_object();
      (*o)[keys.back()] = v;
      return json::serialize(parsed);
    };
  }
  static Match request_is(const std::string& method, const std::string& path_suffix) {
    return [method, path_suffix](const api::HttpRequest& r) {
      return r.method == method && r.path.size() >= path_suffix.size() &&
             r.path.compare(r.path.size() - path_suffix.size(), path_suffix.size(), path_suffix) ==
                 0;
    };
  }

  uint64_t protocol_errors(const std::string& d) {
    const auto counters = coordinator().counters();
    const auto it = counters.peer_protocol_errors.find(d);
    return it == counters.peer_protocol_errors.end() ? 0 : it->second;
  }

  // Another reservation a -> c that does not overlap the others' hosts.
  static agent::ReserveRequest request_n(const std::string& id, int n, bool commit = false) {
    agent::ReserveRequest r = request(id, commit);
    r.spec.src_prefixes = {fmt::format("10.20.1.{}/32", n)};
    r.spec.dst_prefixes = {fmt::format("10.20.3.{}/32", n)};
    r.fingerprint = id;
    return r;
  }

  void expect_nothing_held() {
    for (const char* d : kDomains) {
      EXPECT_EQ(holding(d), 0u) << "domain " << d;
      EXPECT_EQ(agent_of(d).check_ledger(), "") << "domain " << d;
    }
  }
};

TEST_F(HostilePeerTest, ReserveAnswersOfWrongTypesAreRefusedAndTheirHoldsAborted) {
  struct Case {
    const char* name;
    Rewrite rewrite;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"gateways", set_field({"gateways"}, json::array{1, json::object{}}),
       "domain w: answer field 'gateways' must be an array of strings"},
      {"public_keys", set_field({"public_keys"}, json::object{{"gw", 5}}),
       "domain w: answer field 'public_keys' must be an object of strings"},
      {"bound", set_field({"bound", "forward", "max_ns"}, "7ms"),
       "domain w: answer field 'bound.forward.max_ns' must be an integer in"},
      {"negative bound", set_field({"bound", "reverse", "links_ns"}, -5),
       "domain w: answer field 'bound.reverse.links_ns' must be >= 0"},
      {"loss", set_field({"bound", "max_loss"}, 3), "domain w: answer field 'bound.max_loss'"},
      {"bound not an object", set_field({"bound"}, json::array{}),
       "domain w: answer field 'bound' must be an object"},
      {"id", set_field({"id"}, 12), "domain w: answer field 'id' must be a string"},
      {"hold", set_field({"hold_expires_unix_ns"}, "soon"),
       "domain w: answer field 'hold_expires_unix_ns' must be an integer"},
      {"not an object", [](const std::string&) { return std::string("[1, 2]"); },
       "domain w: the answer is not a JSON object"},
      {"not JSON", [](const std::string&) { return std::string("<html>oops"); },
       "domain w: the answer is not JSON"},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    open("w");  // its real handler again, then the mangled answer of this case
    mangle("w", request_is("POST", "/v1/federation/segments"), c.rewrite);
    const uint64_t before = protocol_errors("w");
    ++n;
    auto out = coordinator().reserve(request_n(fmt::format("hostile-{}", n), n, true));
    ASSERT_FALSE(out.has_value()) << json::serialize(*out);
    EXPECT_EQ(out.error().status, 502);
    EXPECT_EQ(out.error().code, "peer_protocol");
    EXPECT_NE(out.error().message.find(c.message), std::string::npos) << out.error().message;
    EXPECT_EQ(protocol_errors("w"), before + 1);
    // w did hold a segment before it answered: found by its client_request_id and aborted,
    // as is x's; z was never asked.
    expect_nothing_held();
  }
  for (const json::value& a : coordinator().list()) {
    EXPECT_EQ(str(a.as_object(), "state"), "terminated") << json::serialize(a);
    for (const json::value& s : a.at("segments").as_array()) {
      EXPECT_FALSE(s.at("cleanup").as_bool()) << json::serialize(a);
    }
  }
}

TEST_F(HostilePeerTest, MalformedReserveAnswerOverHttpNamesTheDomain) {
  mangle("w", request_is("POST", "/v1/federation/segments"),
         set_field({"gateways"}, json::array{1, json::object{}}));
  const std::string body = R"({"src":"a","dst":"c","min_bandwidth_bps":50000000,
      "duration_ns":600000000000,"encrypt":"none","client_request_id":"job-hostile"})";
  auto [status, r] = http("x", "POST", "/v1/reservations", body);
  EXPECT_EQ(status, 502) << json::serialize(r);
  const json::object error = r.at("error").as_object();
  EXPECT_EQ(str(error, "code"), "peer_protocol");
  EXPECT_EQ(str(error, "domain"), "w");
  EXPECT_EQ(str(error, "message"), "domain w: answer field 'gateways' must be an array of strings");
  expect_nothing_held();
  // x's agent still serves.
  auto [s2, again] = http("x", "GET", "/v1/reservations");
  EXPECT_EQ(s2, 200) << json::serialize(again);
}

TEST_F(HostilePeerTest, MalformedCommitAnswerIsCompensatedLikeAFailedCommit) {
  struct Case {
    const char* name;
    Rewrite rewrite;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"state", set_field({"state"}, 5), "domain w: answer field 'state' must be a string"},
      {"unknown state", set_field({"state"}, "committedish"),
       "domain w: answer field 'state' is 'committedish', not a state of a segment"},
      {"held after commit", set_field({"state"}, "held"),
       "domain w: answer field 'state' is 'held' after a commit"},
      {"not an object", [](const std::string&) { return std::string("\"ok\""); },
       "domain w: the answer is not a JSON object"},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    open("w");
    ++n;
    auto held = coordinator().reserve(request_n(fmt::format("commit-{}", n), n));
    ASSERT_TRUE(held.has_value()) << held.error().message;
    const std::string id = str(*held, "id");
    mangle("w", request_is("POST", "/commit"), c.rewrite);
    auto committed = coordinator().commit(id);
    ASSERT_FALSE(committed.has_value());
    EXPECT_EQ(committed.error().status, 502);
    EXPECT_EQ(committed.error().code, "peer_protocol");
    EXPECT_NE(committed.error().message.find(c.message), std::string::npos)
        << committed.error().message;
    // w committed before it answered; the compensation terminated every segment.
    auto got = coordinator().get(id);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(str(*got, "state"), "failed");
    EXPECT_EQ(str(*got, "reason"), committed.error().message);
    expect_nothing_held();
  }
}

TEST_F(HostilePeerTest, DataplaneActiveThatIsNotABooleanIsAnErrorOfThatSegment) {
  auto committed = coordinator().reserve(request("active", true));
  ASSERT_TRUE(committed.has_value()) << committed.error().message;
  const std::string id = str(*committed, "id");
  const std::string w_id = agent_of("w").reservation_of_request(fmt::format("{}@x/w", id));
  ASSERT_FALSE(w_id.empty());
  mangle("w", request_is("GET", "/v1/federation/segments/" + w_id),
         set_field({"dataplane_active"}, "yes"));
  const uint64_t before = protocol_errors("w");
  auto provisioned = coordinator().provision(id);
  ASSERT_TRUE(provisioned.has_value()) << provisioned.error().message;
  EXPECT_EQ(str(*provisioned, "state"), "provisioned");
  EXPECT_FALSE(provisioned->at("dataplane_active").as_bool());
  const json::object& w = provisioned->at("segments").as_array()[1].as_object();
  EXPECT_FALSE(w.at("dataplane_active").as_bool());
  EXPECT_EQ(str(w, "error"), "domain w: answer field 'dataplane_active' must be a boolean");
  EXPECT_GT(protocol_errors("w"), before);
  // The provisioned segments were kept; a terminate still reaches every one.
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 1u) << d;
  auto terminated = coordinator().terminate(id);
  ASSERT_TRUE(terminated.has_value()) << terminated.error().message;
  expect_nothing_held();
}

TEST_F(HostilePeerTest, MalformedAnswersToLookupAndAbortStillReleaseTheHold) {
  // w's reserve answer is malformed and so is its answer to the lookup by client_request_id:
  // the abort is retried until w answers properly, and nothing stays held.
  mangle("w", request_is("POST", "/v1/federation/segments"), set_field({"gateways"}, 7));
  Slot& slot = *domains["w"].slot;
  {
    std::lock_guard lock(slot.mutex);
    api::Handler inner = slot.handler;
    slot.handler = [inner](api::HttpRequest r, api::Respond send) {
      if (r.method == "GET" && r.path == "/v1/federation/segments") {
        api::HttpResponse lie;
        lie.body = R"({"id": ["r-1"], "state": "held"})";
        return send(lie);
      }
      inner(std::move(r), std::move(send));
    };
  }
  auto out = coordinator().reserve(request("lookup"));
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code, "peer_protocol");
  EXPECT_EQ(holding("w"), 1u);  // not found yet: the lookup's answer was no use
  const json::object a = coordinator().list()[0].as_object();
  const json::object& seg = a.at("segments").as_array()[1].as_object();
  EXPECT_TRUE(seg.at("cleanup").as_bool()) << json::serialize(a);
  EXPECT_EQ(str(seg, "error"), "domain w: answer field 'id' must be a string")
      << json::serialize(a);
  open("w");  // w answers properly again
  coordinator().tick();
  expect_nothing_held();
  EXPECT_FALSE(coordinator().list()[0].at("segments").as_array()[1].at("cleanup").as_bool());
}

TEST_F(HostilePeerTest, PeerRequestsOfWrongTypesAre400NamingTheField) {
  const std::string x_to_w = token("x", "w");
  auto call = [&](const std::string& method, const std::string& path, const std::string& body) {
    return http("w", method, path, body, x_to_w);
  };
  auto expect_400 = [&](const std::string& method, const std::string& path, const std::string& body,
                        const std::string& field) {
    SCOPED_TRACE(method + " " + path + " " + body);
    auto [status, answer] = call(method, path, body);
    EXPECT_EQ(status, 400) << json::serialize(answer);
    const json::object error = answer.contains("error") && answer.at("error").is_object()
                                   ? answer.at("error").as_object()
                                   : json::object{};
    EXPECT_EQ(str(error, "field"), field) << json::serialize(answer);
    EXPECT_EQ(str(error, "message").rfind(field + ":", 0), 0u) << json::serialize(answer);
  };
  const std::string good =
      R"({"client_request_id":"h-1@x/w","aggregate":{"id":"r-9","domain":"x"},
      "from":"a.ac1","to":"c.ac1","rate_bps":10000000,"start_unix_ns":)" +
      std::to_string(kStartNs) + R"(,"end_unix_ns":)" + std::to_string(kStartNs + 600 * kSecond) +
      R"(,"tunnel_id":40100,"encrypt":"none"})";
  auto with = [&](const std::string& key, const std::string& value) {
    json::object o = json::parse(good).as_object();
    o[key] = json::parse(value);
    return json::serialize(o);
  };
  // Segment requests.
  const std::string segments = "/v1/federation/segments";
  expect_400("POST", segments, with("rate_bps", R"("lots")"), "rate_bps");
  expect_400("POST", segments, with("rate_bps", "-1"), "rate_bps");
  expect_400("POST", segments, with("start_unix_ns", "1.5"), "start_unix_ns");
  expect_400("POST", segments, with("end_unix_ns", "123456789012345678901234567890"),
             "end_unix_ns");
  expect_400("POST", segments, with("tunnel_id", "1e30"), "tunnel_id");
  expect_400("POST", segments, with("tunnel_id", "0"), "tunnel_id");
  expect_400("POST", segments, with("from", "7"), "from");
  expect_400("POST", segments, with("encrypt", "false"), "encrypt");
  expect_400("POST", segments, with("src_prefixes", "[1]"), "src_prefixes");
  expect_400("POST", segments, with("dst_prefixes", R"("10.0.0.0/8")"), "dst_prefixes");
  expect_400("POST", segments, with("aggregate", "5"), "aggregate");
  expect_400("POST", segments, with("aggregate", R"({"id": 5})"), "aggregate.id");
  expect_400("POST", segments, with("remote_gateways", R"({"gw-c": 1})"), "remote_gateways");
  expect_400("POST", segments, with("hold_timeout_ns", "null"), "hold_timeout_ns");
  expect_400("GET", segments + "?client_request_id=%zz", "", "client_request_id");
  expect_400("GET", segments + "?client_request_id=ab%4", "", "client_request_id");
  EXPECT_EQ(holding("w"), 0u);
  // Ids that are not ids.
  for (const std::string id :
       {"%zz", "123456789012345678901234567890", "r-123456789012345678901234567890",
        "r-18446744073709551616", "r-", "r-1x"}) {
    expect_400("GET", segments + "/" + id, "", "id");
    expect_400("PATCH", segments + "/" + id, R"({"min_bandwidth_bps": 1})", "id");
    expect_400("POST", segments + "/" + id + "/abort", "", "id");
    expect_400("POST", segments + "/" + id + "/commit", "{}", "id");
  }
  // A segment held, then changed with fields of wrong types: refused, still held as it was.
  auto [created, segment] = call("POST", segments, good);
  ASSERT_EQ(created, 201) << json::serialize(segment);
  const std::string id = str(segment, "id");
  const std::string one = segments + "/" + id;
  expect_400("PATCH", one, R"({"min_bandwidth_bps": "fast"})", "min_bandwidth_bps");
  expect_400("PATCH", one, R"({"min_bandwidth_bps": -1})", "min_bandwidth_bps");
  expect_400("PATCH", one, R"({"end_unix_ns": 1.5})", "end_unix_ns");
  expect_400("PATCH", one, R"({"end_unix_ns": [1]})", "end_unix_ns");
  expect_400("POST", one + "/commit", R"({"far_gateway": 7})", "far_gateway");
  expect_400("POST", one + "/commit", R"({"far_prefixes": [1]})", "far_prefixes");
  expect_400("POST", one + "/commit", R"({"far_public_key": {}})", "far_public_key");
  expect_400("POST", one + "/commit", R"({"tunnel_id": "40100"})", "tunnel_id");
  expect_400("POST", one + "/commit", R"({"playout_bound_ns": true})", "playout_bound_ns");
  expect_400("POST", one + "/commit", R"({"bound": {"playout_bound_ns": "1ms"}})",
             "bound.playout_bound_ns");
  expect_400("POST", one + "/commit", R"({"bound": {"delivery": 1}})", "bound.delivery");
  expect_400("POST", one + "/commit", R"({"aggregate": []})", "aggregate");
  auto [got, now] = call("GET", one, "");
  ASSERT_EQ(got, 200) << json::serialize(now);
  EXPECT_EQ(str(now, "state"), "held");
  EXPECT_EQ(now.at("rate_bps").to_number<uint64_t>(), 10'000'000u);
  EXPECT_EQ(holding("w"), 1u);
  // The peer can still abort it, and w still serves.
  auto [aborted, gone] = call("POST", one + "/abort", "");
  EXPECT_EQ(aborted, 200) << json::serialize(gone);
  expect_nothing_held();
  auto [viewed, view] = call("GET", "/v1/federation/view", "");
  EXPECT_EQ(viewed, 200) << json::serialize(view);
}

TEST_F(HostilePeerTest, CorruptJournalRowsAreSkippedAndTheOtherReservationsRecover) {
  auto first = coordinator().reserve(request_n("corrupt-1", 1));
  auto second = coordinator().reserve(request_n("corrupt-2", 2));
  auto third = coordinator().reserve(request_n("corrupt-3", 3));
  auto fourth = coordinator().reserve(request_n("corrupt-4", 4));
  for (auto* r : {&first, &second, &third, &fourth}) {
    ASSERT_TRUE(r->has_value()) << r->error().message;
  }
  agent::Agent& x = agent_of("x");
  const std::string id1 = str(*first, "id");
  const std::string id2 = str(*second, "id");
  const std::string id3 = str(*third, "id");
  const std::string id4 = str(*fourth, "id");
  auto row_of = [&](const std::string& id) {
    for (const auto& [row_id, body] : x.federation_rows("aggregate")) {
      if (row_id == id) return json::parse(body).as_object();
    }
    return json::object{};
  };
  auto write = [&](const std::string& id, const std::string& body) {
    ASSERT_TRUE(x.journal_federation("aggregate", id, body).has_value());
  };
  // 1: not JSON; 2: a segment that is not an object (accessors would throw on both).
  write(id1, "{\"id\": \"" + id1 + "\", \"state\": ");
  json::object row2 = row_of(id2);
  row2["segments"].as_array()[1] = 5;
  write(id2, json::serialize(row2));
  // 3: interrupted mid-commit, and its bound lost (the commit is re-sent without one).
  json::object row3 = row_of(id3);
  row3["state"] = "committing";
  row3["decision"] = "commit";
  row3.erase("bound");
  write(id3, json::serialize(row3));
  // 4: a mistyped gateway list: skipped rather than sent on as a far gateway.
  json::object row4 = row_of(id4);
  row4["segments"].as_array()[2].as_object()["gateways"] = json::array{json::object{}};
  write(id4, json::serialize(row4));
  open("x");  // the coordinator opens on the corrupt journal
  EXPECT_EQ(coordinator().counters().journal_rows_skipped, 3u);
  EXPECT_FALSE(coordinator().owns(id1));
  EXPECT_FALSE(coordinator().owns(id2));
  EXPECT_FALSE(coordinator().owns(id4));
  auto recovered = coordinator().get(id3);
  ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
  EXPECT_EQ(str(*recovered, "state"), "committed") << json::serialize(*recovered);
  // The skipped reservations' segments expire by each domain's hold timer; the recovered one
  // stays committed, and can still be terminated everywhere.
  realtime.advance_ns(11 * kSecond);
  monotonic.advance_ns(11 * kSecond);
  tick_all();
  for (const char* d : kDomains) {
    EXPECT_EQ(holding(d), 1u) << d;
    EXPECT_EQ(agent_of(d).check_ledger(), "") << d;
  }
  auto terminated = coordinator().terminate(id3);
  ASSERT_TRUE(terminated.has_value()) << terminated.error().message;
  expect_nothing_held();
}

}  // namespace
}  // namespace detwan::control::testing
