// control/reservation/reservation_json: the codec the API and the journal share. Every field
// survives a round trip; errors name the missing or malformed field.
#include "control/reservation/reservation_json.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace detwan::control::reservation {
namespace {

namespace json = boost::json;

admission::DirectionBound direction(int64_t base) {
  admission::DirectionBound d;
  d.egress_ns = base + 1;
  d.links_ns = base + 2;
  d.transit_ns = base + 3;
  d.processing_ns = base + 4;
  d.max_ns = base + 5;
  d.min_ns = base + 6;
  d.playout_error_ns = base + 7;
  return d;
}

admission::Bound bound(int64_t base, bool on_time) {
  admission::Bound b;
  b.on_time = on_time;
  b.playout_bound_ns = on_time ? base + 10 : 0;
  b.max_latency_ns = base + 11;
  b.max_latency_variation_ns = base + 12;
  b.min_latency_ns = base + 13;
  b.propagation_ns = base + 14;
  b.max_loss = 0.000123456789;
  b.forward = direction(base + 100);
  b.reverse = direction(base + 200);
  return b;
}

// Every field set, none at its default.
Reservation full() {
  Reservation r;
  r.id = "r-42";
  r.key = 42;
  r.version = 3;
  r.client_request_id = "client-7";
  r.state = State::kProvisioned;
  r.reason = "provisioned_by_client";
  r.spec.src = "a";
  r.spec.dst = "b";
  r.spec.min_bandwidth_bps = 123'456'789;
  r.spec.max_burst_bytes = 20'000;
  r.spec.max_latency_ns = 9'000'000;
  r.spec.max_latency_variation_ns = 150'000;
  r.spec.max_loss = 0.0123;
  r.spec.paths = 2;
  r.spec.asap = true;
  r.spec.start_ns = 1'800'000'000'000'000'000;
  r.spec.end_ns = 1'800'003'600'000'000'000;
  r.spec.duration_ns = 3'600'000'000'000;
  r.hold_expires_ns = 1'799'999'999'000'000'000;
  r.tunnel_id = 1234;
  r.burst_bytes = 20'000;
  for (int p = 0; p < 2; ++p) {
    PathPlacement placement;
    placement.nodes = {"a", p == 0 ? "r1" : "r2", "b"};
    placement.links = {p == 0 ? "a-r1" : "a-r2", p == 0 ? "r1-b" : "r2-b"};
    for (int e = 0; e < 2; ++e) {
      EndPlacement& end = placement.ends[e];
      end.gateway = e == 0 ? "gw-a" : "gw-b";
      end.link = placement.links[e == 0 ? 0 : 1];
      end.from = e == 0 ? "a" : "b";
      end.port = "wan" + std::to_string(p);
      end.peer = "peer-" + std::to_string(p) + std::to_string(e);
      end.slots = {0, 1, 2, 98, 99, static_cast<uint32_t>(10 + p + e)};
      end.guaranteed_bps = 130'000'000u + static_cast<uint64_t>(p * 10 + e);
    }
    placement.bound = bound(1000 * (p + 1), p == 1);
    r.paths.push_back(placement);
  }
  r.bound = bound(5000, true);
  r.created_ns = 1'799'999'000'000'000'000;
  r.updated_ns = 1'799'999'500'000'000'000;
  r.history = {{1'799'999'000'000'000'000, "", "held", "reserved"},
               {1'799'999'100'000'000'000, "held", "committed", "committed_by_client"},
               {1'799'999'500'000'000'000, "committed", "provisioned", "provisioned_by_client"}};
  r.dataplane_active = true;
  r.gateways = {{"gw-a", true, 17, ""}};
  return r;
}

void expect_direction_eq(const admission::DirectionBound& a, const admission::DirectionBound& b) {
  EXPECT_EQ(a.egress_ns, b.egress_ns);
  EXPECT_EQ(a.links_ns, b.links_ns);
  EXPECT_EQ(a.transit_ns, b.transit_ns);
  EXPECT_EQ(a.processing_ns, b.processing_ns);
  EXPECT_EQ(a.max_ns, b.max_ns);
  EXPECT_EQ(a.min_ns, b.min_ns);
  EXPECT_EQ(a.playout_error_ns, b.playout_error_ns);
}

void expect_bound_eq(const admission::Bound& a, const admission::Bound& b) {
  EXPECT_EQ(a.on_time, b.on_time);
  EXPECT_EQ(a.playout_bound_ns, b.playout_bound_ns);
  EXPECT_EQ(a.max_latency_ns, b.max_latency_ns);
  EXPECT_EQ(a.max_latency_variation_ns, b.max_latency_variation_ns);
  EXPECT_EQ(a.min_latency_ns, b.min_latency_ns);
  EXPECT_EQ(a.propagation_ns, b.propagation_ns);
  EXPECT_EQ(a.max_loss, b.max_loss);  // exact: the codec must not lose digits
  expect_direction_eq(a.forward, b.forward);
  expect_direction_eq(a.reverse, b.reverse);
}

// Every journaled field (the dataplane state is maintained from the gateways, not journaled).
void expect_reservation_eq(const Reservation& a, const Reservation& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.client_request_id, b.client_request_id);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.spec.src, b.spec.src);
  EXPECT_EQ(a.spec.dst, b.spec.dst);
  EXPECT_EQ(a.spec.min_bandwidth_bps, b.spec.min_bandwidth_bps);
  EXPECT_EQ(a.spec.max_burst_bytes, b.spec.max_burst_bytes);
  EXPECT_EQ(a.spec.max_latency_ns, b.spec.max_latency_ns);
  EXPECT_EQ(a.spec.max_latency_variation_ns, b.spec.max_latency_variation_ns);
  EXPECT_EQ(a.spec.max_loss, b.spec.max_loss);
  EXPECT_EQ(a.spec.paths, b.spec.paths);
  EXPECT_EQ(a.spec.encrypt, b.spec.encrypt);
  EXPECT_EQ(a.spec.asap, b.spec.asap);
  EXPECT_EQ(a.spec.start_ns, b.spec.start_ns);
  EXPECT_EQ(a.spec.end_ns, b.spec.end_ns);
  EXPECT_EQ(a.spec.duration_ns, b.spec.duration_ns);
  EXPECT_EQ(a.hold_expires_ns, b.hold_expires_ns);
  EXPECT_EQ(a.tunnel_id, b.tunnel_id);
  EXPECT_EQ(a.burst_bytes, b.burst_bytes);
  ASSERT_EQ(a.paths.size(), b.paths.size());
  for (size_t p = 0; p < a.paths.size(); ++p) {
    SCOPED_TRACE("path " + std::to_string(p));
    EXPECT_EQ(a.paths[p].nodes, b.paths[p].nodes);
    EXPECT_EQ(a.paths[p].links, b.paths[p].links);
    for (int e = 0; e < 2; ++e) {
      const EndPlacement& x = a.paths[p].ends[e];
      const EndPlacement& y = b.paths[p].ends[e];
      EXPECT_EQ(x.gateway, y.gateway);
      EXPECT_EQ(x.link, y.link);
      EXPECT_EQ(x.from, y.from);
      EXPECT_EQ(x.port, y.port);
      EXPECT_EQ(x.peer, y.peer);
      EXPECT_EQ(x.slots, y.slots);
      EXPECT_EQ(x.guaranteed_bps, y.guaranteed_bps);
    }
    expect_bound_eq(a.paths[p].bound, b.paths[p].bound);
  }
  expect_bound_eq(a.bound, b.bound);
  EXPECT_EQ(a.created_ns, b.created_ns);
  EXPECT_EQ(a.updated_ns, b.updated_ns);
  ASSERT_EQ(a.history.size(), b.history.size());
  for (size_t i = 0; i < a.history.size(); ++i) {
    EXPECT_EQ(a.history[i].at_ns, b.history[i].at_ns);
    EXPECT_EQ(a.history[i].from, b.history[i].from);
    EXPECT_EQ(a.history[i].to, b.history[i].to);
    EXPECT_EQ(a.history[i].reason, b.history[i].reason);
  }
}

TEST(ReservationJson, RoundTripThroughTextKeepsEveryField) {
  const Reservation r = full();
  const std::string text = json::serialize(to_json(r));
  const json::value parsed = json::parse(text);
  ASSERT_TRUE(parsed.is_object());
  const auto back = from_json(parsed.as_object());
  ASSERT_TRUE(back.has_value()) << back.error().message;
  expect_reservation_eq(r, *back);
  // Not journaled: back at their defaults.
  EXPECT_FALSE(back->dataplane_active);
  EXPECT_TRUE(back->gateways.empty());
}

TEST(ReservationJson, RoundTripInMemoryKeepsEveryField) {
  // The same without text in between: from_json(to_json(r)) must accept what to_json makes.
  const Reservation r = full();
  const auto back = from_json(to_json(r));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  expect_reservation_eq(r, *back);
}

TEST(ReservationJson, EveryStateRoundTrips) {
  for (const State s : {State::kHeld, State::kCommitted, State::kProvisioned, State::kReleased,
                        State::kTerminated, State::kFailed}) {
    Reservation r = full();
    r.state = s;
    const auto back = from_json(json::parse(json::serialize(to_json(r))).as_object());
    ASSERT_TRUE(back.has_value()) << back.error().message;
    EXPECT_EQ(back->state, s);
  }
}

TEST(ReservationJson, ApiViewCarriesStateNsiAndThePrimaryPath) {
  Reservation r = full();
  r.state = State::kTerminated;
  r.reason = "end_time";
  const json::object o = to_json(r);
  EXPECT_EQ(o.at("state").as_string(), "terminated");
  EXPECT_EQ(o.at("nsi").at("reservation_state").as_string(), "ReserveStart");
  EXPECT_EQ(o.at("nsi").at("provision_state").as_string(), "Released");
  EXPECT_EQ(o.at("nsi").at("lifecycle_state").as_string(), "PassedEndTime");
  EXPECT_EQ(o.at("path"), json::parse(R"(["a","r1","b"])"));
  EXPECT_EQ(o.at("links"), json::parse(R"(["a-r1","r1-b"])"));
  EXPECT_EQ(o.at("src").as_string(), "a");
  EXPECT_EQ(o.at("bound").at("delivery").as_string(), "on_time");
  EXPECT_EQ(o.at("paths").at(0).at("bound").at("delivery").as_string(), "in_time");
  EXPECT_EQ(o.at("dataplane").at("active").as_bool(), true);
  EXPECT_EQ(o.at("dataplane").at("gateways").at(0).at("generation").to_number<int64_t>(), 17);
  r.paths.clear();
  EXPECT_TRUE(to_json(r).at("path").as_array().empty());
}

// Removes the value at a path of keys/indices ("spec", "end_unix_ns") from the JSON of full().
json::object without(const std::vector<std::string>& path) {
  json::value v = json::parse(json::serialize(to_json(full())));
  json::value* at = &v;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (at->is_array()) {
      at = &at->as_array().at(std::stoul(path[i]));
    } else {
      at = &at->as_object().at(path[i]);
    }
  }
  EXPECT_EQ(at->as_object().erase(path.back()), 1u) << path.back();
  return v.as_object();
}

// Replaces the value at `path` of the JSON of full().
json::object with(const std::vector<std::string>& path, json::value value) {
  json::value v = json::parse(json::serialize(to_json(full())));
  json::value* at = &v;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    at = at->is_array() ? &at->as_array().at(std::stoul(path[i])) : &at->as_object().at(path[i]);
  }
  at->as_object()[path.back()] = std::move(value);
  return v.as_object();
}

void expect_refused(const json::object& o, const std::vector<std::string>& words) {
  const auto r = from_json(o);
  ASSERT_FALSE(r.has_value()) << "accepted";
  for (const std::string& w : words) {
    EXPECT_NE(r.error().message.find(w), std::string::npos)
        << "'" << w << "' not in: " << r.error().message;
  }
}

TEST(ReservationJson, AJournalFromBeforeEncryptionKeepsItsUnencryptedTunnel) {
  // Secure by default applies to new requests; a reservation journaled without "encrypt" was
  // admitted unencrypted and is read back as it was.
  const auto old = from_json(without({"spec", "encrypt"}));
  ASSERT_TRUE(old.has_value()) << old.error().message;
  EXPECT_EQ(old->spec.encrypt, "none");
  for (const char* cipher : {"none", "aes-256-gcm", "chacha20-poly1305"}) {
    const auto back = from_json(with({"spec", "encrypt"}, json::string(cipher)));
    ASSERT_TRUE(back.has_value()) << back.error().message;
    EXPECT_EQ(back->spec.encrypt, cipher);
  }
  expect_refused(with({"spec", "encrypt"}, json::string("rot13")), {"encrypt", "cipher"});
  // What a new reservation gets when nothing names a cipher.
  EXPECT_EQ(Reservation{}.spec.encrypt, "aes-256-gcm");
}

TEST(ReservationJson, MissingFieldsAreNamed) {
  expect_refused(without({"version"}), {"r-42", "'version' is missing"});
  expect_refused(without({"id"}), {"'id' is missing"});
  expect_refused(without({"spec", "end_unix_ns"}), {"r-42", "spec", "'end_unix_ns' is missing"});
  expect_refused(without({"spec", "max_loss"}), {"spec", "'max_loss' is missing"});
  expect_refused(without({"paths", "0", "ends", "1", "slots"}),
                 {"paths", "ends", "'slots' is missing"});
  expect_refused(without({"bound", "forward", "max_ns"}), {"bound.forward", "'max_ns' is missing"});
  expect_refused(without({"history", "2", "reason"}), {"history", "'reason' is missing"});
  expect_refused(without({"created_unix_ns"}), {"'created_unix_ns' is missing"});
}

TEST(ReservationJson, MalformedFieldsAreNamed) {
  expect_refused(with({"version"}, "3"), {"'version' is not a non-negative integer"});
  expect_refused(with({"version"}, -3), {"'version' is not a non-negative integer"});
  expect_refused(with({"state"}, "bogus"), {"'state' is not a state"});
  expect_refused(with({"spec", "asap"}, 1), {"'asap' is not true/false"});
  expect_refused(with({"spec", "src"}, 5), {"'src' is not a string"});
  expect_refused(with({"spec"}, json::array{}), {"'spec' is not an object"});
  expect_refused(with({"paths", "0", "ends"}, json::array{json::object{}}),
                 {"'ends' must have two items"});
  expect_refused(with({"paths", "0", "ends", "0", "slots"}, json::array{70000}),
                 {"'slots' has a bad slot"});
  expect_refused(with({"paths", "0", "nodes"}, json::array{"a", 1}), {"'nodes' has an item"});
  expect_refused(with({"id"}, "x-42"), {"'id' is not like r-<number>"});
  expect_refused(with({"id"}, "r-abc"), {"'id'"});
  expect_refused(with({"id"}, "r-42x"), {"'id'"});
}

}  // namespace
}  // namespace detwan::control::reservation
