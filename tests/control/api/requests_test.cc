// control/api/requests: JSON request bodies -> agent requests; every refusal names its field.
#include "control/api/requests.h"

#include <string>

#include <gtest/gtest.h>

namespace detwan::control::api {
namespace {

template <typename T>
void expect_refused(const agent::Outcome<T>& outcome, const std::string& code,
                    const std::string& field, const std::string& words) {
  ASSERT_FALSE(outcome.has_value()) << "accepted";
  EXPECT_EQ(outcome.error().status, 400);
  EXPECT_EQ(outcome.error().code, code) << outcome.error().message;
  EXPECT_EQ(outcome.error().field, field) << outcome.error().message;
  EXPECT_NE(outcome.error().message.find(words), std::string::npos)
      << "'" << words << "' not in: " << outcome.error().message;
}

TEST(ParseReserve, AcceptsAFullValidBody) {
  const auto r = parse_reserve(R"({
    "client_request_id": "req-1", "src": "a", "dst": "b", "min_bandwidth_bps": 50000000,
    "max_burst_bytes": 20000, "max_latency_ns": 9000000, "max_latency_variation_ns": 0,
    "max_loss": 0.001, "paths": 2, "start_unix_ns": 1800000000000000000,
    "end_unix_ns": 1800003600000000000, "hold_timeout_ns": 5000000000, "commit": true,
    "provision": false})");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->client_request_id, "req-1");
  EXPECT_EQ(r->spec.src, "a");
  EXPECT_EQ(r->spec.dst, "b");
  EXPECT_EQ(r->spec.min_bandwidth_bps, 50'000'000u);
  EXPECT_EQ(r->spec.max_burst_bytes, 20'000u);
  EXPECT_EQ(r->spec.max_latency_ns, 9'000'000);
  EXPECT_EQ(r->spec.max_latency_variation_ns, 0);
  EXPECT_DOUBLE_EQ(r->spec.max_loss, 0.001);
  EXPECT_EQ(r->spec.paths, 2u);
  EXPECT_FALSE(r->spec.asap);
  EXPECT_EQ(r->spec.start_ns, 1'800'000'000'000'000'000);
  EXPECT_FALSE(r->start_now);
  EXPECT_EQ(r->spec.end_ns, 1'800'003'600'000'000'000);
  EXPECT_EQ(r->spec.duration_ns, 0);
  EXPECT_EQ(r->hold_timeout_ns, 5'000'000'000);
  EXPECT_TRUE(r->commit);
  EXPECT_FALSE(r->provision);
}

TEST(ParseReserve, DefaultsOfAMinimalBody) {
  const auto r =
      parse_reserve(R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000})");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->spec.max_burst_bytes, 0u);
  EXPECT_EQ(r->spec.max_latency_ns, 0);
  EXPECT_EQ(r->spec.max_latency_variation_ns, -1);
  EXPECT_DOUBLE_EQ(r->spec.max_loss, 1.0);
  EXPECT_EQ(r->spec.paths, 1u);
  EXPECT_TRUE(r->start_now);
  EXPECT_EQ(r->spec.duration_ns, 1'000'000);
  EXPECT_EQ(r->hold_timeout_ns, 0);
  EXPECT_FALSE(r->commit);
  EXPECT_TRUE(r->client_request_id.empty());
  // Secure by default: no "encrypt" is an encrypted, authenticated tunnel.
  EXPECT_EQ(r->spec.encrypt, "aes-256-gcm");
  // asap with a duration.
  const auto asap = parse_reserve(
      R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000,"asap":true})");
  ASSERT_TRUE(asap.has_value()) << asap.error().message;
  EXPECT_TRUE(asap->spec.asap);
  // null is the same as absent.
  const auto nulls = parse_reserve(
      R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000,"max_loss":null,"paths":null})");
  ASSERT_TRUE(nulls.has_value()) << nulls.error().message;
  EXPECT_EQ(nulls->spec.paths, 1u);
}

TEST(ParseReserve, RefusesBodiesThatAreNotAJsonObject) {
  expect_refused(parse_reserve(""), "invalid_body", "", "needs a JSON object");
  expect_refused(parse_reserve("{\"src\": "), "invalid_body", "", "not JSON");
  expect_refused(parse_reserve("not json"), "invalid_body", "", "not JSON");
  expect_refused(parse_reserve("[1, 2]"), "invalid_body", "", "must be a JSON object");
  expect_refused(parse_reserve("42"), "invalid_body", "", "must be a JSON object");
}

TEST(ParseReserve, ProtectOnePlusOneImpliesTwoPathsAndOtherValuesAreRefused) {
  const std::string base = R"("src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000)";
  auto r = parse_reserve("{" + base + R"(,"protect":"1+1"})");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE(r->spec.protect);
  EXPECT_EQ(r->spec.paths, 2u);
  r = parse_reserve("{" + base + R"(,"protect":"none","paths":3})");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_FALSE(r->spec.protect);
  EXPECT_EQ(r->spec.paths, 3u);
  expect_refused(parse_reserve("{" + base + R"(,"protect":"1:1"})"), "invalid_field", "protect",
                 "\"none\" or \"1+1\"");
  expect_refused(parse_reserve("{" + base + R"(,"protect":"1+1","paths":1})"), "invalid_field",
                 "paths", "2 disjoint paths");
}

TEST(ParseReserve, EncryptNamesACipherOrNoneByName) {
  const std::string base = R"("src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000)";
  for (const std::string cipher : {"aes-256-gcm", "chacha20-poly1305", "none"}) {
    const auto r = parse_reserve("{" + base + R"(,"encrypt":")" + cipher + "\"}");
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->spec.encrypt, cipher);
  }
  // null is the same as absent: the default, never "none".
  const auto null = parse_reserve("{" + base + R"(,"encrypt":null})");
  ASSERT_TRUE(null.has_value()) << null.error().message;
  EXPECT_EQ(null->spec.encrypt, "aes-256-gcm");
  expect_refused(parse_reserve("{" + base + R"(,"encrypt":"aes-128-gcm"})"), "invalid_field",
                 "encrypt", "\"none\"");
  expect_refused(parse_reserve("{" + base + R"(,"encrypt":""})"), "invalid_field", "encrypt",
                 "\"aes-256-gcm\"");
}

TEST(ParseReserve, UnknownFieldIsNamedWithTheAllowedOnes) {
  const auto r = parse_reserve(
      R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000,"bandwidth":5})");
  expect_refused(r, "invalid_field", "bandwidth", "unknown field");
  EXPECT_NE(r.error().message.find("field 'bandwidth'"), std::string::npos);
  EXPECT_NE(r.error().message.find("allowed: client_request_id, src, dst, src_prefixes, dst_prefixes, min_bandwidth_bps"),
            std::string::npos)
      << r.error().message;
}

TEST(ParseReserve, WrongTypes) {
  const std::string base = R"("src":"a","dst":"b","duration_ns":1000000)";
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":"1000"})"), "invalid_field",
                 "min_bandwidth_bps", "must be an integer");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000.5})"), "invalid_field",
                 "min_bandwidth_bps", "must be an integer");
  expect_refused(
      parse_reserve(R"({"src":5,"dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000})"),
      "invalid_field", "src", "must be a string");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"commit":"yes"})"),
                 "invalid_field", "commit", "must be true or false");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"max_loss":"0.1"})"),
                 "invalid_field", "max_loss", "must be a number");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"client_request_id":7})"),
                 "invalid_field", "client_request_id", "must be a string");
}

TEST(ParseReserve, OutOfRange) {
  const std::string base = R"("src":"a","dst":"b","duration_ns":1000000)";
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":999})"), "invalid_field",
                 "min_bandwidth_bps", "999 is out of range [1000, ");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":-5})"), "invalid_field",
                 "min_bandwidth_bps", "out of range");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":18446744073709551615})"),
                 "invalid_field", "min_bandwidth_bps", "must be an integer");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"paths":5})"),
                 "invalid_field", "paths", "5 is out of range [1, 4]");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"max_loss":1.5})"),
                 "invalid_field", "max_loss", "[0, 1]");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"max_loss":-0.1})"),
                 "invalid_field", "max_loss", "[0, 1]");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"max_burst_bytes":63})"),
                 "invalid_field", "max_burst_bytes", "out of range");
  expect_refused(
      parse_reserve(R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":999999})"),
      "invalid_field", "duration_ns", "out of range");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"hold_timeout_ns":1})"),
                 "invalid_field", "hold_timeout_ns", "out of range");
  expect_refused(parse_reserve("{" + base + R"(,"min_bandwidth_bps":1000,"client_request_id":")" +
                               std::string(129, 'x') + "\"}"),
                 "invalid_field", "client_request_id", "longer than 128 bytes");
}

TEST(ParseReserve, RequiredFieldsAndCombinations) {
  expect_refused(parse_reserve(R"({"src":"a","dst":"b","duration_ns":1000000})"), "invalid_field",
                 "min_bandwidth_bps", "is required");
  expect_refused(parse_reserve(R"({"dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000})"),
                 "invalid_field", "src", "is required");
  expect_refused(
      parse_reserve(R"({"src":"a","dst":"","min_bandwidth_bps":1000,"duration_ns":1000000})"),
      "invalid_field", "dst", "is required");
  expect_refused(
      parse_reserve(
          R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000,"end_unix_ns":5})"),
      "invalid_field", "duration_ns", "not both");
  expect_refused(parse_reserve(R"({"src":"a","dst":"b","min_bandwidth_bps":1000})"),
                 "invalid_field", "duration_ns", "is required (or end_unix_ns)");
  expect_refused(
      parse_reserve(
          R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"end_unix_ns":5,"asap":true})"),
      "invalid_field", "duration_ns", "asap reservation needs a duration");
  expect_refused(
      parse_reserve(
          R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000,"asap":true,"start_unix_ns":5})"),
      "invalid_field", "start_unix_ns", "starts when it can");
}

TEST(ParseReserve, FingerprintIgnoresClientRequestIdAndKeyOrder) {
  const auto a = parse_reserve(
      R"({"client_request_id":"one","src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000})");
  const auto b = parse_reserve(
      R"({"duration_ns":1000000,"min_bandwidth_bps":1000,"dst":"b","src":"a","client_request_id":"two"})");
  const auto c =
      parse_reserve(R"({"src":"a","dst":"b","min_bandwidth_bps":1000,"duration_ns":1000000})");
  const auto d =
      parse_reserve(R"({"src":"a","dst":"b","min_bandwidth_bps":1001,"duration_ns":1000000})");
  const auto e =
      parse_reserve(R"({"src":"b","dst":"a","min_bandwidth_bps":1000,"duration_ns":1000000})");
  ASSERT_TRUE(a && b && c && d && e);
  EXPECT_FALSE(a->fingerprint.empty());
  EXPECT_EQ(a->fingerprint, b->fingerprint);
  EXPECT_EQ(a->fingerprint, c->fingerprint);
  EXPECT_NE(a->fingerprint, d->fingerprint);
  EXPECT_NE(a->fingerprint, e->fingerprint);
  EXPECT_EQ(a->fingerprint.find("one"), std::string::npos);
}

TEST(ParseModify, ValidAndRefused) {
  auto m = parse_modify(R"({"client_request_id":"m1","min_bandwidth_bps":2000,"end_unix_ns":99})");
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ(m->client_request_id, "m1");
  ASSERT_TRUE(m->min_bandwidth_bps.has_value());
  EXPECT_EQ(*m->min_bandwidth_bps, 2000u);
  ASSERT_TRUE(m->end_ns.has_value());
  EXPECT_EQ(*m->end_ns, 99);
  m = parse_modify("{}");
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->min_bandwidth_bps.has_value());
  EXPECT_FALSE(m->end_ns.has_value());
  expect_refused(parse_modify(R"({"src":"a"})"), "invalid_field", "src",
                 "allowed: client_request_id, min_bandwidth_bps, end_unix_ns");
  expect_refused(parse_modify(R"({"min_bandwidth_bps":10})"), "invalid_field", "min_bandwidth_bps",
                 "out of range");
  expect_refused(parse_modify(R"({"end_unix_ns":"soon"})"), "invalid_field", "end_unix_ns",
                 "must be an integer");
  expect_refused(parse_modify("[]"), "invalid_body", "", "must be a JSON object");
  const auto x = parse_modify(R"({"client_request_id":"x","min_bandwidth_bps":2000})");
  const auto y = parse_modify(R"({"min_bandwidth_bps":2000,"client_request_id":"y"})");
  ASSERT_TRUE(x && y);
  EXPECT_EQ(x->fingerprint, y->fingerprint);
}

TEST(ParsePaths, ValidAndRefused) {
  auto p = parse_paths(R"({"src":"a","dst":"b"})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->min_bandwidth_bps, 0u);
  EXPECT_EQ(p->duration_ns, 3'600'000'000'000);
  EXPECT_EQ(p->k, 1u);
  EXPECT_TRUE(p->require_capacity);
  EXPECT_EQ(p->start_ns, 0);
  p = parse_paths(
      R"({"src":"a","dst":"b","min_bandwidth_bps":5000,"k":8,"require_capacity":false,"duration_ns":2000000,"start_unix_ns":7})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->k, 8u);
  EXPECT_FALSE(p->require_capacity);
  EXPECT_EQ(p->duration_ns, 2'000'000);
  EXPECT_EQ(p->start_ns, 7);
  expect_refused(parse_paths(R"({"src":"a","dst":"b","k":9})"), "invalid_field", "k",
                 "9 is out of range [1, 8]");
  expect_refused(parse_paths(R"({"src":"a"})"), "invalid_field", "dst", "is required");
  expect_refused(parse_paths(R"({"src":"a","dst":"b","paths":2})"), "invalid_field", "paths",
                 "unknown field");
  expect_refused(parse_paths(R"({"src":"a","dst":"b","require_capacity":1})"), "invalid_field",
                 "require_capacity", "must be true or false");
  expect_refused(parse_paths("nope"), "invalid_body", "", "not JSON");
}

}  // namespace
}  // namespace detwan::control::api
