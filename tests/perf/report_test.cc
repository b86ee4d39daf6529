// detwan-perf output: the DirectionResult JSON codec, the --json document and --json-stream
// lines, the table, the --raw CSV and the --plot figure. Results are built by hand so these
// tests do not depend on the measurement code.
#include "tools/perf/report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "tools/perf/metrics.h"

namespace detwan::perf {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;
using ::testing::Not;

Distribution make_distribution(int64_t base) {
  Distribution d;
  d.count = static_cast<uint64_t>(base) * 3 + 1;
  d.min = -base;
  d.mean = static_cast<double>(base) + 0.1;  // not exactly representable: exercises doubles
  d.p50 = base + 1;
  d.p90 = base + 2;
  d.p99 = base + 3;
  d.p99_9 = base + 4;
  d.p99_99 = base + 5;
  d.p99_999 = base + 6;
  d.max = base + 7;
  return d;
}

// Every field distinct, signed fields negative, a count above INT64_MAX.
DirectionResult make_full_result() {
  DirectionResult r;
  r.start_ns = 1'000'000'001;
  r.end_ns = 11'000'000'002;
  r.sent = 18'000'000'000'000'000'000ULL;
  r.received = 9'990;
  r.lost = 10;
  r.reordered = 3;
  r.duplicates = 2;
  r.malformed = 1;
  r.beyond_bound = 7;
  r.bound_ns = 2'000'000;
  r.received_bytes = 639'360;
  r.throughput_bps = 511'488.123456789;
  r.rfc3550_jitter_ns = 1234.5678;
  r.clock_offset_ns = -123'456'789;
  r.clock_error_ns = 4'321;
  r.clock_corrected = true;
  r.owd_ns = make_distribution(100'000);
  r.rtt_ns = make_distribution(200'000);
  r.ipdv_ns = make_distribution(300);
  r.pdv_ns = make_distribution(4'000);
  r.schedule_error_ns = make_distribution(50);
  r.loss_bursts = {{1, 4}, {2, 1}, {4, 1}};
  return r;
}

void expect_same(const Distribution& a, const Distribution& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.mean, b.mean);  // exact, not approximately
  EXPECT_EQ(a.p50, b.p50);
  EXPECT_EQ(a.p90, b.p90);
  EXPECT_EQ(a.p99, b.p99);
  EXPECT_EQ(a.p99_9, b.p99_9);
  EXPECT_EQ(a.p99_99, b.p99_99);
  EXPECT_EQ(a.p99_999, b.p99_999);
  EXPECT_EQ(a.max, b.max);
}

void expect_same(const DirectionResult& a, const DirectionResult& b) {
  EXPECT_EQ(a.start_ns, b.start_ns);
  EXPECT_EQ(a.end_ns, b.end_ns);
  EXPECT_EQ(a.sent, b.sent);
  EXPECT_EQ(a.received, b.received);
  EXPECT_EQ(a.lost, b.lost);
  EXPECT_EQ(a.reordered, b.reordered);
  EXPECT_EQ(a.duplicates, b.duplicates);
  EXPECT_EQ(a.malformed, b.malformed);
  EXPECT_EQ(a.beyond_bound, b.beyond_bound);
  EXPECT_EQ(a.bound_ns, b.bound_ns);
  EXPECT_EQ(a.received_bytes, b.received_bytes);
  EXPECT_EQ(a.throughput_bps, b.throughput_bps);
  EXPECT_EQ(a.rfc3550_jitter_ns, b.rfc3550_jitter_ns);
  EXPECT_EQ(a.clock_offset_ns, b.clock_offset_ns);
  EXPECT_EQ(a.clock_error_ns, b.clock_error_ns);
  EXPECT_EQ(a.clock_corrected, b.clock_corrected);
  expect_same(a.owd_ns, b.owd_ns, "owd_ns");
  expect_same(a.rtt_ns, b.rtt_ns, "rtt_ns");
  expect_same(a.ipdv_ns, b.ipdv_ns, "ipdv_ns");
  expect_same(a.pdv_ns, b.pdv_ns, "pdv_ns");
  expect_same(a.schedule_error_ns, b.schedule_error_ns, "schedule_error_ns");
  EXPECT_EQ(a.loss_bursts, b.loss_bursts);
}

TEST(IntervalText, ALiveLinePerIntervalAndDirection) {
  DirectionResult r;
  r.start_ns = 11'000'000'000;
  r.end_ns = 12'000'000'000;
  r.sent = 1000;
  r.received = 999;
  r.lost = 1;
  r.owd_ns.count = 999;
  r.owd_ns.p50 = 5'012'000;
  r.owd_ns.p99 = 5'201'000;
  r.ipdv_ns.count = 998;
  r.ipdv_ns.p99 = 12'000;
  r.throughput_bps = 4e6;
  EXPECT_EQ(interval_text("10.0.0.2:5201", "forward", r, 10'000'000'000),
            "[  1.00-  2.00 s] 10.0.0.2:5201 forward  sent 1000 received 999 lost 1 (0.10 %)  "
            "owd p50 5.012 ms p99 5.201 ms  ipdv p99 12.000 us  4.000 Mbit/s");
  DirectionResult empty;
  EXPECT_NE(interval_text("t", "reverse", empty, 0).find("no delay samples"), std::string::npos);
}

TEST(DirectionJson, RoundTripKeepsEveryFieldExactly) {
  const DirectionResult in = make_full_result();
  auto out = direction_from_json(direction_to_json(in));
  ASSERT_TRUE(out.has_value()) << out.error().message;
  expect_same(in, *out);
}

TEST(DirectionJson, UsesTheCxxNamesAndAddsLossFraction) {
  DirectionResult r = make_full_result();
  r.sent = 1000;
  r.lost = 25;
  json::object o = direction_to_json(r);
  for (const char* key : {"start_ns",
                          "end_ns",
                          "sent",
                          "received",
                          "lost",
                          "reordered",
                          "duplicates",
                          "malformed",
                          "beyond_bound",
                          "bound_ns",
                          "received_bytes",
                          "throughput_bps",
                          "rfc3550_jitter_ns",
                          "clock_offset_ns",
                          "clock_error_ns",
                          "clock_corrected",
                          "owd_ns",
                          "rtt_ns",
                          "ipdv_ns",
                          "pdv_ns",
                          "schedule_error_ns",
                          "loss_bursts",
                          "loss_fraction"}) {
    EXPECT_TRUE(o.contains(key)) << key;
  }
  EXPECT_EQ(o.size(), 23U);  // nothing else
  EXPECT_DOUBLE_EQ(o["loss_fraction"].as_double(), 0.025);
  EXPECT_EQ(o["owd_ns"].as_object().size(), 10U);
  EXPECT_EQ(o["owd_ns"].at("p99_9").to_number<int64_t>(), 100'004);
  EXPECT_EQ(json::serialize(o["loss_bursts"]),
            R"([{"length":1,"count":4},{"length":2,"count":1},{"length":4,"count":1}])");

  r.sent = 0;
  r.lost = 0;
  EXPECT_EQ(direction_to_json(r)["loss_fraction"].as_double(), 0.0);
}

TEST(DirectionJson, AcceptsIntegersForDoublesAndIgnoresUnknownKeys) {
  json::object o = direction_to_json(make_full_result());
  o["throughput_bps"] = 5;
  o["owd_ns"].as_object()["mean"] = 7;
  o["loss_fraction"] = "whatever: derived, not read";
  o["added_in_a_later_version"] = json::array{1, 2};
  auto r = direction_from_json(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->throughput_bps, 5.0);
  EXPECT_EQ(r->owd_ns.mean, 7.0);
}

TEST(DirectionJson, ErrorsNameTheField) {
  struct Case {
    const char* name;
    void (*mutate)(json::object&);
    const char* message;
  };
  const Case cases[] = {
      {"mistyped percentile", [](json::object& o) { o["owd_ns"].as_object()["p99"] = "1ms"; },
       "direction object: field 'owd_ns.p99': expected an integer"},
      {"missing count", [](json::object& o) { o.erase("sent"); },
       "direction object: field 'sent': missing"},
      {"negative count", [](json::object& o) { o["lost"] = -1; },
       "direction object: field 'lost': expected a non-negative integer"},
      {"double for an integer", [](json::object& o) { o["start_ns"] = 1.5; },
       "direction object: field 'start_ns': expected an integer"},
      {"string for a double", [](json::object& o) { o["rfc3550_jitter_ns"] = "x"; },
       "direction object: field 'rfc3550_jitter_ns': expected a number"},
      {"number for a bool", [](json::object& o) { o["clock_corrected"] = 1; },
       "direction object: field 'clock_corrected': expected true or false"},
      {"distribution not an object", [](json::object& o) { o["pdv_ns"] = 3; },
       "direction object: field 'pdv_ns': expected an object"},
      {"missing distribution key",
       [](json::object& o) { o["schedule_error_ns"].as_object().erase("p99_999"); },
       "direction object: field 'schedule_error_ns.p99_999': missing"},
      {"bad burst",
       [](json::object& o) { o["loss_bursts"].as_array()[1].as_object()["count"] = -2; },
       "direction object: field 'loss_bursts[1].count': expected a non-negative integer"},
      {"bursts not an array", [](json::object& o) { o["loss_bursts"] = json::object{}; },
       "direction object: field 'loss_bursts': expected an array"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json::object o = direction_to_json(make_full_result());
    c.mutate(o);
    auto r = direction_from_json(o);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, common::ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message, c.message);
  }
  auto not_object = direction_from_json(json::value(json::array{}));
  ASSERT_FALSE(not_object.has_value());
  EXPECT_EQ(not_object.error().message, "direction object: expected a JSON object");
}

TestReport make_report(bool with_compare) {
  TestReport report;
  report.spec.mode = Mode::kStream;
  report.spec.direction = Direction::kBidir;
  report.spec.schedule = ScheduleKind::kPoisson;
  report.spec.pps = 2000;
  report.spec.size_bytes = 100;
  report.spec.duration_ns = 5'000'000'000;
  report.spec.bound_ns = 1'000'000;
  report.spec.dscp = 46;
  report.spec.seed = 99;
  report.clock = ClockMode::kEstimate;
  // 2026-11-30T09:00:00Z = 1796029200 s since the epoch
  report.start_realtime_ns = 1'796'029'200'123'456'789;
  PathReport primary;
  primary.target = "10.0.0.2:5301";
  primary.forward = make_full_result();
  primary.forward->sent = 1000;
  primary.forward->lost = 10;
  primary.forward->owd_ns.p99 = 1000;
  primary.forward->pdv_ns.p99 = 0;
  primary.forward->beyond_bound = 4;
  report.paths.push_back(primary);
  if (with_compare) {
    PathReport compare;
    compare.target = "10.0.1.2:5301";
    compare.forward = make_full_result();
    compare.forward->sent = 1000;
    compare.forward->lost = 30;
    compare.forward->owd_ns.p99 = 4000;
    compare.forward->pdv_ns.p99 = 17;
    compare.forward->beyond_bound = 2;
    compare.reverse = make_full_result();
    compare.forward_intervals.push_back(make_full_result());
    compare.error = "peer vanished after 3.2 s";
    report.paths.push_back(compare);
  }
  return report;
}

TEST(ReportJson, DocumentHasTheSchemaTestAndTopLevelDirections) {
  TestReport report = make_report(false);
  report.paths[0].reverse_intervals.push_back(make_full_result());
  json::value doc = json::parse(to_json(report));
  const json::object& o = doc.as_object();
  EXPECT_EQ(o.at("schema").as_string(), "detwan-perf");
  EXPECT_EQ(o.at("version").as_int64(), 1);
  EXPECT_EQ(o.at("start").as_string(), "2026-11-30T09:00:00.123456789Z");
  const json::object& test = o.at("test").as_object();
  EXPECT_EQ(test.at("mode").as_string(), "stream");
  EXPECT_EQ(test.at("direction").as_string(), "bidir");
  EXPECT_EQ(test.at("schedule").as_string(), "poisson");
  EXPECT_EQ(test.at("pps").to_number<int64_t>(), 2000);
  EXPECT_EQ(test.at("size_bytes").to_number<int64_t>(), 100);
  EXPECT_EQ(test.at("duration_ns").to_number<int64_t>(), 5'000'000'000);
  EXPECT_EQ(test.at("bound_ns").to_number<int64_t>(), 1'000'000);
  EXPECT_EQ(test.at("dscp").to_number<int64_t>(), 46);
  EXPECT_EQ(test.at("seed").to_number<int64_t>(), 99);
  EXPECT_EQ(test.at("clock").as_string(), "estimate");
  for (const char* key : {"bitrate_bps", "burst_packets", "interval_ns"}) {
    EXPECT_TRUE(test.contains(key)) << key;
  }
  EXPECT_EQ(o.at("target").as_string(), "10.0.0.2:5301");
  ASSERT_TRUE(o.contains("forward"));
  EXPECT_FALSE(o.contains("reverse"));  // not measured: absent, not null
  EXPECT_FALSE(o.contains("error"));
  EXPECT_FALSE(o.contains("compare"));
  EXPECT_FALSE(o.contains("ratios"));
  ASSERT_TRUE(o.contains("intervals"));
  EXPECT_FALSE(o.at("intervals").as_object().contains("forward"));
  EXPECT_EQ(o.at("intervals").at("reverse").as_array().size(), 1U);

  // The printed document parses back into the same direction result (the doubles here are
  // exact in binary: Boost.JSON 1.81's parser may be 1 ulp off on others).
  DirectionResult expected = *report.paths[0].forward;
  expected.throughput_bps = 511'488.125;
  expected.rfc3550_jitter_ns = 1234.5;
  for (Distribution* d : {&expected.owd_ns, &expected.rtt_ns, &expected.ipdv_ns, &expected.pdv_ns,
                          &expected.schedule_error_ns}) {
    d->mean = 0.25;
  }
  report.paths[0].forward = expected;
  doc = json::parse(to_json(report));
  auto back = direction_from_json(doc.at("forward"));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  expect_same(expected, *back);
}

TEST(ReportJson, ErrorAndAbsentForwardAreReported) {
  TestReport report = make_report(false);
  report.paths[0].forward.reset();
  report.paths[0].reverse = make_full_result();
  report.paths[0].error = "server: peer vanished";
  json::object o = json::parse(to_json(report)).as_object();
  EXPECT_FALSE(o.contains("forward"));
  EXPECT_TRUE(o.contains("reverse"));
  EXPECT_FALSE(o.contains("intervals"));
  EXPECT_EQ(o.at("error").as_string(), "server: peer vanished");
}

TEST(ReportJson, CompareAndRatios) {
  json::object o = json::parse(to_json(make_report(true))).as_object();
  ASSERT_TRUE(o.contains("compare"));
  const json::object& c = o.at("compare").as_object();
  EXPECT_EQ(c.at("target").as_string(), "10.0.1.2:5301");
  EXPECT_TRUE(c.contains("forward"));
  EXPECT_TRUE(c.contains("reverse"));
  EXPECT_EQ(c.at("intervals").at("forward").as_array().size(), 1U);
  EXPECT_EQ(c.at("error").as_string(), "peer vanished after 3.2 s");
  // The primary path stays at the top level.
  EXPECT_EQ(o.at("target").as_string(), "10.0.0.2:5301");
  EXPECT_EQ(o.at("forward").at("owd_ns").at("p99").to_number<int64_t>(), 1000);

  const json::object& ratios = o.at("ratios").as_object();
  EXPECT_FALSE(ratios.contains("reverse"));  // the primary has no reverse result
  const json::object& f = ratios.at("forward").as_object();
  EXPECT_DOUBLE_EQ(f.at("owd_p99").as_double(), 4.0);
  EXPECT_TRUE(f.at("pdv_p99").is_null());  // primary 0
  EXPECT_DOUBLE_EQ(f.at("loss_fraction").as_double(), 3.0);
  EXPECT_DOUBLE_EQ(f.at("beyond_bound").as_double(), 0.5);
  EXPECT_DOUBLE_EQ(f.at("owd_p50").as_double(), 1.0);  // same values on both
  for (const char* key : {"owd_p50", "owd_p99", "owd_p99_9", "owd_max", "pdv_p99", "pdv_p99_9",
                          "ipdv_p99", "rfc3550_jitter", "loss_fraction", "beyond_bound"}) {
    EXPECT_TRUE(f.contains(key)) << key;
  }
}

TEST(ReportJson, IntervalLineIsOneCompactObject) {
  DirectionResult r = make_full_result();
  r.sent = 42;
  std::string line = interval_line("h:1", "reverse", r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_TRUE(line.starts_with(R"({"type":"interval","target":"h:1","direction":"reverse",)"))
      << line;
  json::object o = json::parse(line).as_object();
  EXPECT_EQ(o.size(), 4U);
  EXPECT_EQ(o.at("interval").at("sent").to_number<int64_t>(), 42);
}

TEST(ReportJson, SummaryLineCarriesTheWholeDocumentOnOneLine) {
  const TestReport report = make_report(true);
  const std::string line = summary_line(report);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  json::object o = json::parse(line).as_object();
  EXPECT_EQ(o.at("type").as_string(), "summary");
  // The result is the --json document itself, value for value.
  EXPECT_EQ(o.at("result"), json::parse(to_json(report)));
}

std::string table_of(const TestReport& report) {
  std::FILE* f = std::tmpfile();
  if (f == nullptr) return "tmpfile failed";
  print_table(report, f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

TEST(ReportTable, ShowsCountsBurstsAndPercentilesInMicroseconds) {
  TestReport report;
  PathReport p;
  p.target = "srv:5301";
  DirectionResult r;
  r.start_ns = 0;
  r.end_ns = 10'000'000'000;
  r.sent = 1000;
  r.received = 995;
  r.lost = 5;
  r.reordered = 6;
  r.duplicates = 7;
  r.malformed = 8;
  r.bound_ns = 0;
  r.throughput_bps = 512'000;
  r.rfc3550_jitter_ns = 12'345;
  r.clock_offset_ns = -1'500;
  r.clock_error_ns = 20'000;
  r.clock_corrected = true;
  r.owd_ns = {995, 10'000, 10'100.5, 10'500, 11'000, 12'000, 13'000, 14'000, 15'000, 16'000};
  r.pdv_ns = {995, 0, 600.0, 500, 1'000, 2'000, 3'000, 4'000, 5'000, 6'000};
  r.loss_bursts = {{1, 3}, {2, 1}};
  p.forward = r;
  report.paths.push_back(p);
  std::string t = table_of(report);
  EXPECT_THAT(t, HasSubstr("[srv:5301 forward]"));
  EXPECT_THAT(t, HasSubstr("sent 1000"));
  EXPECT_THAT(t, HasSubstr("received 995"));
  EXPECT_THAT(t, HasSubstr("lost 5 (0.500%)"));
  EXPECT_THAT(t, HasSubstr("reordered 6"));
  EXPECT_THAT(t, HasSubstr("duplicates 7"));
  EXPECT_THAT(t, HasSubstr("malformed 8"));
  EXPECT_THAT(t, Not(HasSubstr("beyond bound")));  // no bound given
  EXPECT_THAT(t, HasSubstr("512.000 kbit/s"));
  EXPECT_THAT(t, HasSubstr("jitter 12.345 us"));
  EXPECT_THAT(t, HasSubstr("clock offset -1.500 us +- 20.000 us"));
  EXPECT_THAT(t, HasSubstr("corrected"));
  EXPECT_THAT(t, HasSubstr("loss bursts (length x count): 1x3, 2x1"));
  // owd row: 10..16 us with 3 decimals, in column order min p50 p90 p99 p99.9 p99.99 p99.999 max
  EXPECT_THAT(t, ::testing::ContainsRegex(
                     "owd +995 +10\\.000 +10\\.500 +11\\.000 +12\\.000 +13\\.000 +14\\.000 "
                     "+15\\.000 +16\\.000\n"));
  EXPECT_THAT(t, ::testing::ContainsRegex("pdv +995 +0\\.000 +0\\.500 +1\\.000"));
  EXPECT_THAT(t, HasSubstr("p99.999"));
  EXPECT_THAT(t, Not(HasSubstr("rtt")));  // count 0: row skipped
  EXPECT_THAT(t, Not(HasSubstr("sched err")));
  EXPECT_THAT(t, Not(HasSubstr("comparison")));

  report.paths[0].forward->bound_ns = 1'000'000;
  report.paths[0].forward->beyond_bound = 199;
  report.paths[0].error = "peer vanished";
  t = table_of(report);
  EXPECT_THAT(t, HasSubstr("beyond bound 199 (20.000% of received, bound 1.000 ms)"));
  EXPECT_THAT(t, HasSubstr("error: peer vanished"));
}

TEST(ReportTable, ComparisonBlockHasRatios) {
  std::string t = table_of(make_report(true));
  EXPECT_THAT(t, HasSubstr("comparison: 10.0.1.2:5301 (compare) / 10.0.0.2:5301 (primary)"));
  EXPECT_THAT(t, ::testing::ContainsRegex("owd p99 \\(us\\) +1\\.000 +4\\.000 +4\\.00x"));
  EXPECT_THAT(t, ::testing::ContainsRegex("pdv p99 \\(us\\) +0\\.000 +0\\.017 +-\n"));
  EXPECT_THAT(t, ::testing::ContainsRegex("loss \\(%\\) +1\\.000 +3\\.000 +3\\.00x"));
  EXPECT_THAT(t, HasSubstr("[10.0.1.2:5301 reverse]"));
  EXPECT_THAT(t, HasSubstr("error: peer vanished after 3.2 s"));
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A scratch file name in the test's temporary directory, removed by the fixture.
class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "report_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(FilesTest, RawCsvCorrectsOnlyCorrectedDirections) {
  TestReport report;
  PathReport p;
  p.target = "a:1";
  p.forward = DirectionResult{};
  p.forward->clock_offset_ns = 500;
  p.forward->clock_corrected = true;
  p.reverse = DirectionResult{};
  p.reverse->clock_offset_ns = 700;  // estimated but not applied
  p.forward_packets = {{0, 1000, 3000}, {2, 2000, 3500}};
  p.reverse_packets = {{5, 10, 20}};
  report.paths.push_back(p);
  PathReport q;
  q.target = "b:2";
  q.forward_packets = {{1, 100, 50}};  // no result: no correction; negative delay kept
  report.paths.push_back(q);
  ASSERT_TRUE(write_raw_csv(report, file("raw.csv")).has_value());
  EXPECT_EQ(read_all(file("raw.csv")),
            "target,direction,seq,tx_ns,rx_ns,owd_ns\n"
            "a:1,forward,0,1000,3000,1500\n"
            "a:1,forward,2,2000,3500,1000\n"
            "a:1,reverse,5,10,20,10\n"
            "b:2,forward,1,100,50,-50\n");
}

TEST_F(FilesTest, RawCsvNamesTheFileItCannotWrite) {
  const std::string path = file("no-such-dir/raw.csv");
  auto r = write_raw_csv(TestReport{}, path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, common::ErrorCode::kIo);
  EXPECT_EQ(r.error().message, "--raw '" + path + "': No such file or directory");
}

TEST_F(FilesTest, RawCsvReportsAFailedWrite) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  TestReport report;
  PathReport p;
  p.target = "a:1";
  p.forward_packets = {{0, 1, 2}};
  report.paths.push_back(p);
  auto r = write_raw_csv(report, "/dev/full");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, common::ErrorCode::kIo);
  EXPECT_EQ(r.error().message, "--raw '/dev/full': No space left on device");
}

std::set<std::string> plot_temp_dirs() {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/tmp")) {
    if (e.path().filename().string().starts_with("detwan-perf-plot-")) out.insert(e.path());
  }
  return out;
}

// Two paths; the primary's forward stream is large enough to be subsampled.
TestReport plot_report() {
  TestReport report;
  PathReport a;
  a.target = "a:1";
  a.forward = DirectionResult{};
  for (uint64_t i = 0; i < 50'000; ++i) {
    int64_t tx = static_cast<int64_t>(i) * 100'000;
    int64_t owd = 1'000'000 + static_cast<int64_t>(i % 97) * 1'000 + (i == 30'000 ? 9'000'000 : 0);
    a.forward_packets.push_back({i, tx, tx + owd});
  }
  a.reverse = DirectionResult{};
  a.reverse->clock_offset_ns = 1'000;
  a.reverse_packets = {{0, 0, 2'000'000}, {1, 1'000'000, 3'500'000}};
  PathReport b;
  b.target = "b:2";
  for (uint64_t i = 0; i < 300; ++i) {
    b.forward_packets.push_back(
        {i, static_cast<int64_t>(i) * 1'000'000, static_cast<int64_t>(i) * 1'000'000 + 3'000'000});
  }
  report.paths = {a, b};
  return report;
}

TEST_F(FilesTest, PlotWritesAnSvg) {
  const auto before = plot_temp_dirs();
  auto r = write_plot(plot_report(), file("plot.svg"));
  if (!r && r.error().code == common::ErrorCode::kUnavailable) {
    GTEST_SKIP() << "gnuplot is not installed: " << r.error().message;
  }
  ASSERT_TRUE(r.has_value()) << r.error().message;
  std::string svg = read_all(file("plot.svg"));
  EXPECT_TRUE(svg.starts_with("<?xml") || svg.find("<svg") != std::string::npos);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_THAT(svg, HasSubstr("a:1 forward"));
  EXPECT_THAT(svg, HasSubstr("a:1 reverse"));
  EXPECT_THAT(svg, HasSubstr("b:2 forward"));
  EXPECT_EQ(plot_temp_dirs(), before);  // the scratch directory is gone
}

TEST_F(FilesTest, PlotWritesAPng) {
  auto r = write_plot(plot_report(), file("plot.png"));
  if (!r && r.error().code == common::ErrorCode::kUnavailable) {
    GTEST_SKIP() << "gnuplot is not installed: " << r.error().message;
  }
  ASSERT_TRUE(r.has_value()) << r.error().message;
  std::string png = read_all(file("plot.png"));
  ASSERT_GT(png.size(), 1000U);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_F(FilesTest, PlotWithoutRecordsIsAnError) {
  TestReport report;
  PathReport p;
  p.target = "a:1";
  p.forward = DirectionResult{};  // a result, but no per-packet records
  report.paths.push_back(p);
  auto r = write_plot(report, file("plot.svg"));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, common::ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().message, "--plot: no per-packet records were collected");
  EXPECT_FALSE(std::filesystem::exists(file("plot.svg")));
}

TEST_F(FilesTest, PlotQuotesGnuplotsError) {
  auto r = write_plot(plot_report(), file("no-such-dir/plot.svg"));
  if (!r && r.error().code == common::ErrorCode::kUnavailable) {
    GTEST_SKIP() << "gnuplot is not installed: " << r.error().message;
  }
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, common::ErrorCode::kIo);
  EXPECT_THAT(r.error().message, HasSubstr("--plot"));
  EXPECT_THAT(r.error().message, HasSubstr("cannot open file"));  // gnuplot's own words
}

}  // namespace
}  // namespace detwan::perf
