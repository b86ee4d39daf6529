#include "common/status.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace detwan::common {
namespace {

TEST(Status, EveryStatusHasADistinctName) {
  std::set<std::string_view> names;
  for (Status s : {Status::kOk, Status::kBusy, Status::kDropped, Status::kMalformed,
                   Status::kInvalidArgument, Status::kClosed}) {
    EXPECT_FALSE(to_string(s).empty());
    EXPECT_NE(to_string(s), "unknown status");
    names.insert(to_string(s));
  }
  EXPECT_EQ(names.size(), 6U);
  EXPECT_EQ(to_string(Status::kOk), "ok");
  EXPECT_EQ(to_string(Status::kBusy), "busy");
  EXPECT_EQ(to_string(static_cast<Status>(200)), "unknown status");
}

TEST(Status, EveryErrorCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (ErrorCode c : {ErrorCode::kInvalidArgument, ErrorCode::kConfig, ErrorCode::kNotFound,
                      ErrorCode::kAlreadyExists, ErrorCode::kIo, ErrorCode::kUnavailable,
                      ErrorCode::kTimeout, ErrorCode::kInternal}) {
    EXPECT_FALSE(to_string(c).empty());
    names.insert(to_string(c));
  }
  EXPECT_EQ(names.size(), 8U);
  EXPECT_EQ(to_string(ErrorCode::kConfig), "config");
  EXPECT_EQ(to_string(static_cast<ErrorCode>(200)), "unknown error");
}

TEST(Status, DescribePrefixesTheCategory) {
  const Error error{ErrorCode::kConfig, "file.yaml:3:5: field 'wan.delay': bad"};
  EXPECT_EQ(error.describe(), "config: file.yaml:3:5: field 'wan.delay': bad");
  EXPECT_EQ((Error{ErrorCode::kTimeout, "no answer"}).describe(), "timeout: no answer");
  EXPECT_EQ(Error{}.code, ErrorCode::kInternal);
}

TEST(Status, MakeErrorAndResult) {
  auto fails = []() -> Result<int> { return make_error(ErrorCode::kNotFound, "tunnel 7"); };
  auto works = []() -> Result<int> { return 7; };
  const Result<int> bad = fails();
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(bad.error().describe(), "not found: tunnel 7");
  EXPECT_EQ(works().value(), 7);
}

TEST(Status, FailureCarriesTheError) {
  try {
    throw Failure(Error{ErrorCode::kIo, "cannot open x"});
  } catch (const std::runtime_error& e) {  // catchable as a standard exception
    EXPECT_STREQ(e.what(), "io: cannot open x");
    const auto* failure = dynamic_cast<const Failure*>(&e);
    ASSERT_NE(failure, nullptr);
    EXPECT_EQ(failure->error().code, ErrorCode::kIo);
    EXPECT_EQ(failure->error().message, "cannot open x");
  }
}

}  // namespace
}  // namespace detwan::common
