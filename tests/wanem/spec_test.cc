// SPEC grammar: parsing, canonical form, cross-field validation and exact error texts.
#include "tools/wanem/engine/spec.h"
#include "tools/wanem/engine/jitter.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace detwan::wanem {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

ImpairmentSpec parse_ok(std::string_view text) {
  auto spec = parse_spec(text);
  EXPECT_TRUE(spec.has_value()) << text << ": " << (spec ? "" : spec.error().message);
  return spec.value_or(ImpairmentSpec{});
}

TEST(SpecParse, EmptyTextIsNoImpairment) {
  EXPECT_EQ(parse_ok(""), ImpairmentSpec{});
  EXPECT_EQ(parse_ok("   "), ImpairmentSpec{});
  EXPECT_EQ(format_spec(ImpairmentSpec{}), "");
}

TEST(SpecParse, EveryKey) {
  const ImpairmentSpec s = parse_ok(
      "delay=10ms, jitter=1ms,jitter-dist=normal,loss=0.1%,ge=1%/10%/80%/0.5%,dup=2%,"
      "reorder=1%,reorder-ahead=500us,rate=1gbit,queue=1mb,cross=50%,cross-burst=5ms,"
      "cross-size=1000b,prio-dscp=46/34/ef/af41/cs6,prio-port=5000-5999/7000,"
      "down=5s-7s/20s-21.5s,seed=42");
  EXPECT_EQ(s.delay_ns, 10 * kMs);
  EXPECT_EQ(s.jitter_ns, 1 * kMs);
  EXPECT_EQ(s.jitter_distribution, JitterDistribution::kNormal);
  EXPECT_DOUBLE_EQ(s.loss, 0.001);
  EXPECT_TRUE(s.ge.enabled);
  EXPECT_DOUBLE_EQ(s.ge.p_good_to_bad, 0.01);
  EXPECT_DOUBLE_EQ(s.ge.r_bad_to_good, 0.10);
  EXPECT_DOUBLE_EQ(s.ge.loss_in_bad, 0.80);
  EXPECT_DOUBLE_EQ(s.ge.loss_in_good, 0.005);
  EXPECT_DOUBLE_EQ(s.duplicate, 0.02);
  EXPECT_DOUBLE_EQ(s.reorder, 0.01);
  EXPECT_EQ(s.reorder_ahead_ns, 500'000);
  EXPECT_EQ(s.rate_bps, 1'000'000'000u);
  EXPECT_EQ(s.queue_bytes, 1u << 20);
  EXPECT_DOUBLE_EQ(s.cross_share, 0.5);
  EXPECT_EQ(s.cross_burst_ns, 5 * kMs);
  EXPECT_EQ(s.cross_frame_bytes, 1000u);
  EXPECT_EQ(s.prio_dscp, (std::vector<uint8_t>{46, 34, 46, 34, 48}));
  ASSERT_EQ(s.prio_ports.size(), 2u);
  EXPECT_EQ(s.prio_ports[0], (PortRange{5000, 5999}));
  EXPECT_EQ(s.prio_ports[1], (PortRange{7000, 7000}));
  ASSERT_EQ(s.down.size(), 2u);
  EXPECT_EQ(s.down[0], (DownWindow{5 * kSec, 7 * kSec}));
  EXPECT_EQ(s.down[1], (DownWindow{20 * kSec, 21'500 * kMs}));
  EXPECT_EQ(s.seed, 42u);
}

TEST(SpecParse, GeDefaultsAndNone) {
  const ImpairmentSpec s = parse_ok("ge=2%/25%");
  EXPECT_TRUE(s.ge.enabled);
  EXPECT_DOUBLE_EQ(s.ge.loss_in_bad, 1.0);
  EXPECT_DOUBLE_EQ(s.ge.loss_in_good, 0.0);
  EXPECT_FALSE(parse_ok("ge=2%/25%,ge=none").ge.enabled);
}

TEST(SpecParse, JitterDistributionNames) {
  EXPECT_EQ(parse_ok("jitter-dist=uniform").jitter_distribution, JitterDistribution::kUniform);
  EXPECT_EQ(parse_ok("jitter-dist=pareto-normal").jitter_distribution,
            JitterDistribution::kParetoNormal);
  EXPECT_EQ(parse_ok("jitter-dist=paretonormal").jitter_distribution,
            JitterDistribution::kParetoNormal);
}

TEST(SpecParse, RateZeroIsUnlimited) { EXPECT_EQ(parse_ok("rate=1gbit,rate=0").rate_bps, 0u); }

TEST(SpecApply, TokensOverrideBaseAndListsClear) {
  const ImpairmentSpec base = parse_ok("delay=10ms,loss=1%,prio-port=5000,down=1s-2s,seed=7");
  auto changed = apply_spec(base, "loss=2%,prio-port=none,down=none");
  ASSERT_TRUE(changed.has_value()) << changed.error().message;
  EXPECT_EQ(changed->delay_ns, 10 * kMs);
  EXPECT_DOUBLE_EQ(changed->loss, 0.02);
  EXPECT_TRUE(changed->prio_ports.empty());
  EXPECT_TRUE(changed->down.empty());
  EXPECT_EQ(changed->seed, 7u);
  // Cross-field rules see the merged result and quote the token that set the field.
  auto bad = apply_spec(parse_ok("rate=1gbit,cross=20%"), "rate=0");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "'cross=20%': cross needs rate");
}

struct ErrorCase {
  const char* text;
  const char* message;
};

TEST(SpecParse, ErrorsNameTheTokenAndWhy) {
  const ErrorCase cases[] = {
      {"loss=120%", "'loss=120%': fraction must be in [0, 1]"},
      {"loss=-1%", "'loss=-1%': fraction must be in [0, 1]"},
      {"dup=1.5", "'dup=1.5': fraction must be in [0, 1]"},
      {"delay=-1ms", "'delay=-1ms': negative delay"},
      {"jitter=-5us", "'jitter=-5us': negative jitter"},
      {"reorder-ahead=-1ms", "'reorder-ahead=-1ms': negative reorder-ahead"},
      {"delay=10ms,colour=red",
       "'colour=red': unknown key (known: delay, jitter, jitter-dist, loss, ge, dup, reorder, "
       "reorder-ahead, rate, queue, cross, cross-burst, cross-size, prio-dscp, prio-port, "
       "prio-queue, down, seed)"},
      {"cross=50%", "'cross=50%': cross needs rate"},
      {"delay", "'delay': expected key=value"},
      {"delay=", "'delay=': empty value"},
      {"delay=10ms,,loss=1%",
       "'delay=10ms,,loss=1%': empty token (two commas, or a trailing comma)"},
      {"jitter-dist=gauss",
       "'jitter-dist=gauss': unknown distribution (known: uniform, normal, pareto-normal)"},
      {"ge=1%", "'ge=1%': expected P/R[/1-H[/1-K]] (fractions)"},
      {"ge=1%/2%/3%/4%/5%", "'ge=1%/2%/3%/4%/5%': expected P/R[/1-H[/1-K]] (fractions)"},
      {"ge=1%/200%", "'ge=1%/200%': fraction must be in [0, 1]"},
      {"cross-size=10b", "'cross-size=10b': cross-size must be in [64, 65535] bytes"},
      {"cross-burst=0", "'cross-burst=0': must be positive"},
      {"delay=2w", "'delay=2w': unknown duration unit 'w' (use ns, us, ms, s, m, h, d)"},
      {"delay=2d", "'delay=2d': must be at most 86400s"},
      {"delay=90000s", "'delay=90000s': must be at most 86400s"},
      {"prio-dscp=64",
       "'prio-dscp=64': DSCP must be an integer in [0, 63] or a name (ef, af11..af43, cs0..cs7)"},
      {"prio-port=70000", "'prio-port=70000': port must be an integer in [0, 65535]"},
      {"prio-port=6000-5000",
       "'prio-port=6000-5000': port range must be FIRST-LAST with FIRST <= LAST"},
      {"down=7s", "'down=7s': window must be START-END (e.g. 5s-7s)"},
      {"down=7s-5s", "'down=7s-5s': window end must be after its start"},
      {"down=5s-7s/6s-8s",
       "'down=5s-7s/6s-8s': windows must be in increasing order and must not overlap"},
      {"down=-1s-2s", "'down=-1s-2s': negative window start"},
      {"seed=abc", "'seed=abc': seed must be an integer in [0, 18446744073709551615]"},
      {"rate=fast", "'rate=fast': not a number (expected e.g. '1gbit')"},
  };
  for (const ErrorCase& c : cases) {
    auto spec = parse_spec(c.text);
    ASSERT_FALSE(spec.has_value()) << c.text;
    EXPECT_EQ(spec.error().message, c.message) << c.text;
    EXPECT_EQ(spec.error().code, common::ErrorCode::kInvalidArgument);
  }
}

TEST(SpecParse, UnitErrorsKeepTheirReasonUnderTheToken) {
  // The reason comes from common/units; the token is quoted once, in front.
  auto spec = parse_spec("rate=10xbit");
  ASSERT_FALSE(spec.has_value());
  EXPECT_TRUE(spec.error().message.starts_with("'rate=10xbit': unknown rate unit 'xbit'"))
      << spec.error().message;
  spec = parse_spec("queue=1zb");
  ASSERT_FALSE(spec.has_value());
  EXPECT_TRUE(spec.error().message.starts_with("'queue=1zb': unknown size unit"))
      << spec.error().message;
}

TEST(SpecValidate, ProgrammaticSpecsAreChecked) {
  ImpairmentSpec s;
  EXPECT_TRUE(validate(s).has_value());
  s.loss = 2.0;
  EXPECT_EQ(validate(s).error().message, "'loss=2': fraction must be in [0, 1]");
  s = ImpairmentSpec{};
  s.cross_share = 0.25;
  EXPECT_EQ(validate(s).error().message, "'cross=25%': cross needs rate");
  s = ImpairmentSpec{};
  s.delay_ns = -5;
  EXPECT_EQ(validate(s).error().message, "'delay=-5ns': negative delay");
  s = ImpairmentSpec{};
  s.down = {{2 * kSec, 3 * kSec}, {1 * kSec, 4 * kSec}};
  EXPECT_EQ(validate(s).error().message,
            "'down=2s-3s/1s-4s': windows must be in increasing order and must not overlap");
  s = ImpairmentSpec{};
  s.jitter_distribution = static_cast<JitterDistribution>(9);
  EXPECT_FALSE(validate(s).has_value());
  s = ImpairmentSpec{};
  s.duplicate = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(validate(s).has_value());
}

TEST(SpecFormat, CanonicalTextRoundTrips) {
  const char* texts[] = {
      "delay=10ms",
      "delay=10ms,jitter=1ms,loss=0.1%,rate=1gbit,queue=1mb",
      "delay=1.5ms,jitter=250us,jitter-dist=pareto-normal,loss=0.123456789,ge=1%/10%/80%/0.5%,"
      "dup=0.3%,reorder=1%,reorder-ahead=3ms,rate=123456789bit,queue=1500b,cross=33%,"
      "cross-burst=7ms,cross-size=1000b,prio-dscp=46/34,prio-port=5000-5999/7000,"
      "prio-queue=256kb,down=5s-7s/20s-21s,seed=42",
      "loss=0.0001,dup=1e-06,reorder=0.7",
      "ge=0.1%/50%/100%/0%",
      "ge=3%/30%/0.5",
      "delay=1234567ns,rate=3gbit",
  };
  for (const char* text : texts) {
    const ImpairmentSpec s = parse_ok(text);
    const std::string canonical = format_spec(s);
    auto again = parse_spec(canonical);
    ASSERT_TRUE(again.has_value()) << canonical << ": " << again.error().message;
    EXPECT_EQ(*again, s) << text << " -> " << canonical;
    EXPECT_EQ(format_spec(*again), canonical);
  }
  EXPECT_EQ(format_spec(parse_ok("loss=0.1%,delay=10ms,rate=1gbit")),
            "delay=10ms,loss=0.1%,rate=1gbit");
  EXPECT_EQ(format_spec(parse_ok("ge=1%/10%")), "ge=1%/10%");
  EXPECT_EQ(format_spec(parse_ok("prio-dscp=ef,prio-port=80-80")), "prio-dscp=46,prio-port=80");
}

TEST(SpecQueue, EffectiveQueueBytes) {
  ImpairmentSpec s;
  EXPECT_EQ(s.effective_queue_bytes(), 0u);  // no rate: no queue
  s.rate_bps = 1'000'000'000;
  EXPECT_EQ(s.effective_queue_bytes(), 6'250'000u);  // 50 ms at 1 Gbit/s
  s.rate_bps = 1'000'000;
  EXPECT_EQ(s.effective_queue_bytes(), 65'536u);  // at least 64 KiB
  s.queue_bytes = 1500;
  EXPECT_EQ(s.effective_queue_bytes(), 1500u);
}

// The forwarder leaves arrivals unread up to min_delay_ns (ForwarderOptions::rx_coalesce_ns): no
// draw may ever give less.
TEST(SpecMinDelay, NoJitterDrawGoesBelowIt) {
  for (const char* text : {"delay=10ms,jitter=1ms", "delay=10ms,jitter=2ms,jitter-dist=normal",
                           "delay=5ms,jitter=1ms,jitter-dist=pareto-normal"}) {
    const auto spec = parse_spec(text);
    ASSERT_TRUE(spec.has_value()) << text;
    const JitterSampler sampler(spec->jitter_ns, spec->jitter_distribution);
    Rng rng(7, RngStream::kJitter);
    int64_t lowest = INT64_MAX;
    for (int i = 0; i < 200'000; ++i) lowest = std::min(lowest, spec->delay_ns + sampler.sample(rng));
    EXPECT_GE(lowest, spec->min_delay_ns()) << text;
    EXPECT_GT(spec->min_delay_ns(), 0) << text;
  }
  auto reordered = parse_spec("delay=10ms,reorder=1%");
  ASSERT_TRUE(reordered.has_value());
  EXPECT_EQ(reordered->min_delay_ns(), 10'000'000 - reordered->reorder_ahead_ns);
  auto none = parse_spec("rate=1gbit");
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->min_delay_ns(), 0);  // no delay: the forwarder never coalesces
}

}  // namespace
}  // namespace detwan::wanem
