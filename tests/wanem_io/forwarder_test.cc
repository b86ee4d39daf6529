// The forwarding loop, the control requests and the option merging of detwan-wanem, hermetic:
// a scripted in-memory port and the virtual clock, no sockets, no sleeps.
#include "tools/wanem/forwarder.h"

#include <atomic>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "common/clock.h"
#include "tools/wanem/options.h"
#include "tools/wanem/post_queue.h"
#include "tools/wanem/session.h"

namespace detwan::wanem {
namespace {

// Delivers scripted frames on side A at given virtual times; every rx_burst() call moves the
// virtual clock on by kStepNs, so a busy-polling forwarder walks through time by itself.
class ScriptedPort {
 public:
  static constexpr int64_t kStepNs = 1'000;

  struct Arrival {
    int64_t at_ns;
    uint32_t bytes;
    int64_t stamp_ns = 0;  // the device's receive timestamp; 0: none (rx_time_ns() says 0)
  };
  struct Sent {
    Side side;
    uint64_t handle;
    int64_t at_ns;
  };

  ScriptedPort(common::VirtualClock& clock, std::vector<Arrival> arrivals)
      : clock_(clock), arrivals_(std::move(arrivals)) {}

  uint32_t rx_burst(Side side, uint64_t* handles, uint32_t count) noexcept {
    if (side == Side::kA) clock_.advance_ns(kStepNs);
    uint32_t n = 0;
    while (side == Side::kA && n < count && next_ < arrivals_.size() &&
           arrivals_[next_].at_ns <= clock_.now_ns()) {
      handles[n++] = allocate(arrivals_[next_].bytes);
      stamps_.push_back(arrivals_[next_].stamp_ns);
      ++next_;
    }
    counters_.side[index_of(side)].rx_packets += n;
    return n;
  }
  uint32_t tx_burst(Side side, const uint64_t* handles, uint32_t count) noexcept {
    uint32_t accepted = 0;
    for (; accepted < count && busy_calls_ == 0; ++accepted) {
      sent_.push_back({side, handles[accepted], clock_.now_ns()});
      free(handles[accepted]);
    }
    if (busy_calls_ > 0) --busy_calls_;
    counters_.side[index_of(side)].tx_packets += accepted;
    return accepted;
  }
  common::Status clone(uint64_t handle, uint64_t* copy) noexcept {
    *copy = allocate(bytes_[handle]);
    return common::Status::kOk;
  }
  void free(uint64_t) noexcept { ++freed_; }
  const uint8_t* data(uint64_t) const noexcept { return frame_; }
  uint32_t data_bytes(uint64_t handle) const noexcept { return bytes_[handle]; }
  uint32_t frame_bytes(uint64_t handle) const noexcept { return bytes_[handle]; }
  int64_t rx_time_ns(uint64_t handle) const noexcept {
    return handle < stamps_.size() ? stamps_[handle] : 0;
  }
  int rx_fd(Side) const noexcept { return -1; }
  static constexpr bool rx_timestamps() noexcept { return false; }
  PortCounters& counters() noexcept { return counters_; }
  void refresh_counters_st() {}

  const std::vector<Sent>& sent() const { return sent_; }
  uint64_t allocated() const { return bytes_.size(); }
  uint64_t freed() const { return freed_; }
  void refuse_next_tx_calls(int calls) { busy_calls_ = calls; }

 private:
  uint64_t allocate(uint32_t bytes) {
    bytes_.push_back(bytes);
    stamps_.resize(bytes_.size() - 1);  // a clone has no stamp of its own
    return bytes_.size() - 1;
  }

  common::VirtualClock& clock_;
  std::vector<Arrival> arrivals_;
  size_t next_ = 0;
  std::vector<uint32_t> bytes_;
  std::vector<int64_t> stamps_;  // by handle
  std::vector<Sent> sent_;
  uint64_t freed_ = 0;
  int busy_calls_ = 0;
  uint8_t frame_[64] = {};
  PortCounters counters_;
};

static_assert(Port<ScriptedPort>);

ImpairmentSpec spec_of(const std::string& text) {
  auto spec = parse_spec(text);
  EXPECT_TRUE(spec.has_value()) << text;
  return spec.value_or(ImpairmentSpec{});
}

struct Harness {
  explicit Harness(std::vector<ScriptedPort::Arrival> arrivals, const std::string& spec_ab,
                   int64_t run_ns = 50'000'000)
      : port(clock, std::move(arrivals)),
        session(spec_of(spec_ab), spec_of(""), clock.now_ns(), 1024, "scripted") {
    ForwarderOptions options;
    options.end_ns = clock.now_ns() + run_ns;
    forwarder.emplace(port, clock, session, posts, stop, options);
  }

  common::VirtualClock clock{1'000'000'000};
  ScriptedPort port;
  Session session;
  PostQueue posts;
  std::atomic<bool> stop{false};
  std::optional<Forwarder<ScriptedPort, common::VirtualClock>> forwarder;
};

TEST(Forwarder, ReleasesEachFrameAfterTheDelayOnTheOtherSide) {
  const int64_t t0 = 1'000'000'000;
  Harness h({{t0 + 10'000, 100}, {t0 + 20'000, 100}, {t0 + 5'000'000, 1500}}, "delay=10ms");
  h.forwarder->run_st();
  ASSERT_EQ(h.port.sent().size(), 3U);
  const int64_t arrivals[] = {t0 + 10'000, t0 + 20'000, t0 + 5'000'000};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(h.port.sent()[i].side, Side::kB);
    // Read on the first rx_burst at or after the arrival (step 1 us), released at the first
    // iteration at or after arrival + delay.
    EXPECT_GE(h.port.sent()[i].at_ns, arrivals[i] + 10'000'000);
    EXPECT_LE(h.port.sent()[i].at_ns, arrivals[i] + 10'000'000 + 3 * ScriptedPort::kStepNs);
  }
  h.forwarder->drain_st();
  EXPECT_EQ(h.port.allocated(), h.port.freed());
}

// A frame that waited in the device (a receive ring) while the emulator started carries a stamp
// from before the session: it is timed from the session's start, so the delay it is given is the
// configured one. Timed from its stamp, the link would have been busy until the start and the
// emulator's own sojourn would have counted the wait (the lab saw 12-29 ms for delay=10ms,
// jitter=1ms with TPACKET rings).
TEST(Forwarder, AFrameStampedBeforeTheSessionIsTimedFromItsStart) {
  const int64_t t0 = 1'000'000'000;
  // The first frame is in the device when the loop starts: the first receive reads it.
  Harness h({{t0, 100, t0 - 5'000'000}, {t0 + 20'000, 100, t0 + 15'000}}, "delay=10ms");
  h.forwarder->run_st();
  ASSERT_EQ(h.port.sent().size(), 2U);
  const auto& sojourn = h.session.emulator(Direction::kAb)
                            .counters()
                            .sojourn_ns[static_cast<int>(TrafficClass::kBestEffort)];
  EXPECT_EQ(sojourn.count(), 2U);
  EXPECT_EQ(sojourn.max(), 10'000'000);
  EXPECT_EQ(sojourn.min(), 10'000'000);
  // The stamped frame is released at the session's start + delay, the other at its stamp + delay.
  EXPECT_GE(h.port.sent()[0].at_ns, t0 + 10'000'000);
  EXPECT_LE(h.port.sent()[0].at_ns, t0 + 10'000'000 + 3 * ScriptedPort::kStepNs);
  EXPECT_GE(h.port.sent()[1].at_ns, t0 + 15'000 + 10'000'000);
}

TEST(Forwarder, LostFramesAreFreedAndNeverSent) {
  std::vector<ScriptedPort::Arrival> arrivals;
  for (int i = 0; i < 100; ++i) arrivals.push_back({1'000'000'000 + i * 10'000, 64});
  Harness h(arrivals, "loss=100%");
  h.forwarder->run_st();
  EXPECT_TRUE(h.port.sent().empty());
  EXPECT_EQ(h.port.freed(), 100U);
}

TEST(Forwarder, DuplicatesAreClonedAndBothCopiesSent) {
  std::vector<ScriptedPort::Arrival> arrivals;
  for (int i = 0; i < 50; ++i) arrivals.push_back({1'000'000'000 + i * 10'000, 64});
  Harness h(arrivals, "dup=100%");
  h.forwarder->run_st();
  EXPECT_EQ(h.port.sent().size(), 100U);
  h.forwarder->drain_st();
  EXPECT_EQ(h.port.allocated(), h.port.freed());
}

TEST(Forwarder, RefusedFramesAreRetriedNotLost) {
  Harness h({{1'000'000'000 + 10'000, 64}}, "delay=1ms");
  h.port.refuse_next_tx_calls(5);
  h.forwarder->run_st();
  ASSERT_EQ(h.port.sent().size(), 1U);
  EXPECT_EQ(h.port.counters().drops[static_cast<int>(PortDrop::kTxBusy)], 0U);
}

TEST(Forwarder, PostedRequestsRunOnThePollThread) {
  Harness h({}, "delay=1ms", 1'000'000);
  std::string answer;
  ASSERT_TRUE(h.posts.post([&answer](PollThreadView& view) {
    answer = view.session.handle_request_st(R"({"cmd":"set","dir":"ab","tokens":"loss=5%"})", view);
  }));
  h.forwarder->run_st();
  EXPECT_NE(answer.find("\"ok\":true"), std::string::npos) << answer;
  EXPECT_DOUBLE_EQ(h.session.emulator(Direction::kAb).spec().loss, 0.05);
  EXPECT_EQ(h.session.emulator(Direction::kAb).spec().delay_ns, 1'000'000);
  EXPECT_DOUBLE_EQ(h.session.emulator(Direction::kBa).spec().loss, 0.0);
}

TEST(PostQueue, RefusesAfterClose) {
  PostQueue posts;
  posts.close();
  EXPECT_FALSE(posts.post([](PollThreadView&) {}));
  EXPECT_FALSE(posts.pending());
}

class SessionRequests : public ::testing::Test {
 protected:
  std::string request(const std::string& text) {
    PollThreadView view{session, port_counters, loop, 5'000'000'000, {}};
    return session.handle_request_st(text, view);
  }
  static boost::json::object parse(const std::string& text) {
    return boost::json::parse(text).as_object();
  }

  Session session{spec_of("delay=10ms"), spec_of("delay=10ms"), 1'000'000'000, 64, "test"};
  PortCounters port_counters;
  LoopStats loop;
};

TEST_F(SessionRequests, BadTokensAreRefusedNamingTheTokenAndChangeNothing) {
  const auto answer = parse(request(R"({"cmd":"set","dir":"both","tokens":"loss=120%"})"));
  EXPECT_FALSE(answer.at("ok").as_bool());
  EXPECT_NE(std::string(answer.at("error").as_string()).find("loss=120%"), std::string::npos);
  EXPECT_EQ(session.emulator(Direction::kAb).spec().loss, 0.0);
}

TEST_F(SessionRequests, SetBothChangesBothDirections) {
  const auto answer = parse(request(R"({"cmd":"set","tokens":"delay=20ms"})"));
  ASSERT_TRUE(answer.at("ok").as_bool());
  EXPECT_EQ(session.emulator(Direction::kAb).spec().delay_ns, 20'000'000);
  EXPECT_EQ(session.emulator(Direction::kBa).spec().delay_ns, 20'000'000);
}

TEST_F(SessionRequests, LinkDownIsReportedInStats) {
  ASSERT_TRUE(parse(request(R"({"cmd":"link","dir":"ba","up":false})")).at("ok").as_bool());
  const auto answer = parse(request(R"({"cmd":"stats"})"));
  ASSERT_TRUE(answer.at("ok").as_bool());
  const auto& stats = answer.at("stats").as_object();
  EXPECT_TRUE(stats.at("link_up").at("ab").as_bool());
  EXPECT_FALSE(stats.at("link_up").at("ba").as_bool());
  EXPECT_EQ(stats.at("uptime_ns").as_int64(), 4'000'000'000);
  for (const char* key : {"ab", "ba", "port", "loop", "spec"}) EXPECT_TRUE(stats.contains(key));
  EXPECT_TRUE(stats.at("port").at("drops").as_object().contains("oversize"));
}

TEST_F(SessionRequests, MalformedRequestsGetAnError) {
  for (const char* text : {"not json", "{}", R"({"cmd":"fly"})", R"({"cmd":"set"})",
                           R"({"cmd":"set","dir":"up","tokens":"loss=1%"})"}) {
    EXPECT_FALSE(parse(request(text)).at("ok").as_bool()) << text;
  }
}

TEST(RunOptions, PerDirectionSpecOverridesTheSharedOneAndSeedsDiffer) {
  CommandLineSettings cli;
  cli.iface_a = "a0";
  cli.iface_b = "b0";
  cli.spec = "delay=5ms";
  cli.spec_ba = "delay=7ms,seed=99";
  cli.seed = 10;
  const RunOptions options = resolve_run_options(cli);
  EXPECT_EQ(options.spec_ab.delay_ns, 5'000'000);
  EXPECT_EQ(options.spec_ab.seed, 10U);
  EXPECT_EQ(options.spec_ba.delay_ns, 7'000'000);
  EXPECT_EQ(options.spec_ba.seed, 99U);  // named in the spec: --seed does not override it
}

TEST(RunOptions, ErrorsNameTheFieldAndTheFileLine) {
  const std::string file = ::testing::TempDir() + "wanem_io_options.yaml";
  std::ofstream(file) << "iface_a: a0\niface_b: b0\nspec_ab: \"delay=-3ms\"\n";
  CommandLineSettings cli;
  cli.config_file = file;
  try {
    (void)resolve_run_options(cli);
    FAIL() << "accepted a negative delay";
  } catch (const common::Failure& failure) {
    EXPECT_EQ(failure.error().code, common::ErrorCode::kConfig);
    EXPECT_NE(failure.error().message.find(":3:"), std::string::npos) << failure.error().message;
    EXPECT_NE(failure.error().message.find("spec_ab"), std::string::npos);
  }
  CommandLineSettings same;
  same.iface_a = same.iface_b = "x0";
  EXPECT_THROW((void)resolve_run_options(same), common::Failure);
}

TEST(RunOptions, CommandLineWinsOverTheFile) {
  const std::string file = ::testing::TempDir() + "wanem_io_options2.yaml";
  std::ofstream(file) << "iface_a: a0\niface_b: b0\nspec: \"delay=1ms\"\nduration: 2s\n"
                         "rx_ring_frames: 1024\n";
  CommandLineSettings cli;
  cli.config_file = file;
  cli.iface_b = "b9";
  RunOptions options = resolve_run_options(cli);
  EXPECT_EQ(options.iface_a, "a0");
  EXPECT_EQ(options.iface_b, "b9");
  EXPECT_EQ(options.spec_ba.delay_ns, 1'000'000);
  EXPECT_EQ(options.duration_ns, 2'000'000'000);
  EXPECT_EQ(options.rx_ring_frames, 1024u);
  cli.rx_ring_frames = 0;  // recvmmsg
  options = resolve_run_options(cli);
  EXPECT_EQ(options.rx_ring_frames, 0u);
  cli.rx_ring_frames = 1u << 21;
  try {
    (void)resolve_run_options(cli);
    FAIL() << "accepted a 2M-frame ring";
  } catch (const common::Failure& failure) {
    EXPECT_NE(failure.error().message.find("--rx-ring-frames"), std::string::npos)
        << failure.error().message;
  }
}

}  // namespace
}  // namespace detwan::wanem
