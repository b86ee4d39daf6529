// Drop reason names, counters and their JSON, and the bridge to common::Status / Result.
#include "dataplane/wire/drop_reason.h"

#include <cctype>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/wire/status.h"

namespace detwan::dataplane::wire {
namespace {

TEST(DropReason, NamesAreUniqueSnakeCase) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    const std::string name(to_string(static_cast<DropReason>(i)));
    EXPECT_NE(name, "unknown") << i;
    EXPECT_FALSE(name.empty()) << i;
    for (char c : name)
      EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) || c == '_') << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), kDropReasonCount);
  EXPECT_EQ(to_string(DropReason::kCount), "unknown");
  EXPECT_EQ(to_string(static_cast<DropReason>(200)), "unknown");
}

TEST(DropCounters, CountTotalAndMerge) {
  DropCounters c;
  EXPECT_EQ(c.total(), 0u);
  c.add(DropReason::kBadMagic);
  c.add(DropReason::kBadMagic);
  c.add(DropReason::kTooOld);
  c.add(DropReason::kCount);  // out of range: ignored, never out of bounds
  c.add(static_cast<DropReason>(250));
  EXPECT_EQ(c[DropReason::kBadMagic], 2u);
  EXPECT_EQ(c[DropReason::kTooOld], 1u);
  EXPECT_EQ(c[DropReason::kTooShort], 0u);
  EXPECT_EQ(c[DropReason::kCount], 0u);
  EXPECT_EQ(c.total(), 3u);
  DropCounters d;
  d.add(DropReason::kTooOld);
  d += c;
  EXPECT_EQ(d[DropReason::kTooOld], 2u);
  EXPECT_EQ(d[DropReason::kBadMagic], 2u);
  EXPECT_EQ(d.total(), 4u);
}

TEST(DropCounters, JsonHasEveryReasonInOrder) {
  DropCounters c;
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    for (std::size_t n = 0; n < i; ++n) c.add(static_cast<DropReason>(i));
  }
  c.by_reason[0] = 18446744073709551615u;  // full 64-bit range survives
  const std::string text = to_json(c);
  const boost::json::value v = boost::json::parse(text);
  const boost::json::object& o = v.as_object();
  ASSERT_EQ(o.size(), kDropReasonCount);
  std::size_t i = 0;
  for (const auto& [key, value] : o) {
    const auto reason = static_cast<DropReason>(i);
    EXPECT_EQ(std::string(key), to_string(reason));
    const uint64_t n =
        value.is_uint64() ? value.as_uint64() : static_cast<uint64_t>(value.as_int64());
    EXPECT_EQ(n, c[reason]) << key;
    ++i;
  }
  EXPECT_EQ(to_json(DropCounters{}).find("\"too_short\":0"), 1u);
}

TEST(StatusBridge, MalformedVersusDropped) {
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    const auto r = static_cast<DropReason>(i);
    const bool replay = r == DropReason::kDuplicate || r == DropReason::kTooOld;
    EXPECT_EQ(to_status(r), replay ? common::Status::kDropped : common::Status::kMalformed)
        << to_string(r);
  }
}

TEST(StatusBridge, ReplayWindowFromConfig) {
  auto ok = make_replay_window(1024);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->window_bits(), 1024u);
  EXPECT_EQ(ok->check_and_update(1), ReplayVerdict::kNew);

  auto bad = make_replay_window(1000);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, common::ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message,
            "replay window of 1000 bits: must be a power of two in [64, 65536]");
}

}  // namespace
}  // namespace detwan::dataplane::wire
