// Compute pools' JSON (control/compute/pool.h): round trip, every field checked and named.
#include "control/compute/pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace detwan::control::compute {
namespace {

using testing::HasSubstr;

std::string error_of(const std::string& text) {
  auto p = pool_from_json(boost::json::parse(text));
  EXPECT_FALSE(p.has_value()) << text;
  return p ? "" : p.error().message;
}

TEST(Pool, RoundTripsThroughJson) {
  Pool p;
  p.name = "a-cpu";
  p.site = "a";
  p.kind = "cpu";
  p.ranks = 8;
  p.windows = {{100, 200}, {300, 400}};
  p.reference = Reference{2'500'000'000, 5, 4'000'000, "mlp-4x1024", 42, 1'400'000'000};
  p.registered_unix_ns = 7;
  auto again = pool_from_json(to_json(p));
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(to_json(*again), to_json(p));
}

TEST(Pool, AvailabilityNeedsAWindowCoveringTheWholeJob) {
  Pool p;
  p.ranks = 4;
  EXPECT_EQ(p.ranks_during(0, 1'000), 4u);  // no windows: always
  p.windows = {{100, 200}};
  EXPECT_EQ(p.ranks_during(100, 200), 4u);
  EXPECT_EQ(p.ranks_during(150, 250), 0u);
}

TEST(Pool, EveryBadFieldIsNamed) {
  EXPECT_THAT(error_of(R"({"site":"a","kind":"cpu","ranks":1})"), HasSubstr("field 'name'"));
  EXPECT_THAT(error_of(R"({"name":"x y","site":"a","kind":"cpu","ranks":1})"),
              HasSubstr("field 'name'"));
  EXPECT_THAT(error_of(R"({"name":"x","site":"a","kind":"CPU","ranks":1})"),
              HasSubstr("field 'kind'"));
  EXPECT_THAT(error_of(R"({"name":"x","site":"a","kind":"cpu","ranks":0})"),
              HasSubstr("field 'ranks'"));
  EXPECT_THAT(error_of(R"({"name":"x","site":"a","kind":"cpu","ranks":1,"windows":[{"start_unix_ns":5,"end_unix_ns":5}]})"),
              HasSubstr("field 'windows[0]'"));
  EXPECT_THAT(error_of(R"({"name":"x","site":"a","kind":"cpu","ranks":1,"reference":{"step_ns":0,"steps":1,"gradient_bytes":1}})"),
              HasSubstr("field 'reference.step_ns'"));
  // The backward pass is part of the step: never longer than it.
  EXPECT_THAT(error_of(R"({"name":"x","site":"a","kind":"cpu","ranks":1,"reference":{"step_ns":10,"steps":1,"gradient_bytes":1,"backward_ns":11}})"),
              HasSubstr("field 'reference.backward_ns'"));
  EXPECT_THAT(error_of(R"({"name":"x","site":"a","kind":"cpu","ranks":1,"colour":1})"),
              HasSubstr("field 'colour': unknown field"));
}

}  // namespace
}  // namespace detwan::control::compute
