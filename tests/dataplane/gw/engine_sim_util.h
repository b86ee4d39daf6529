#pragma once
// Helpers of the loopback (virtual-time) engine tests: a two-site gateway, traffic flows driven
// at their exact instants, and the checks every emitted frame must pass.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/loopback/gateway.h"
#include "tests/dataplane/gw/engine_test_util.h"
#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::gw::testing {

inline constexpr int64_t kStartNs = 1'000'000'000'000;  // true time of creation (cycle boundary)

// Site a (engine 0) and site b (engine 1); engine i's clock = true time + offsets[i].
inline std::unique_ptr<loopback::Gateway> two_sites(const SiteOptions& a, const SiteOptions& b,
                                                    int64_t offset_a_ns = 0,
                                                    int64_t offset_b_ns = 0, bool capture = false,
                                                    uint64_t seed = 1) {
  std::vector<loopback::EngineSpec> specs = {{site_config(0, a), offset_a_ns},
                                             {site_config(1, b), offset_b_ns}};
  loopback::Options options;
  options.seed = seed;
  options.start_ns = kStartNs;
  options.capture_deliveries = capture;
  auto g = loopback::Gateway::create(std::move(specs), options);
  EXPECT_TRUE(g.has_value()) << g.error().describe();
  return g ? std::move(*g) : nullptr;
}

// A flow of IP packets from one site into the tunnel its destination selects.
struct Flow {
  uint32_t engine = 0;
  uint8_t dst[4] = {};
  uint16_t port = 0;
  Source source;
  uint64_t accepted = 0;  // submit returned kOk
  uint64_t refused = 0;
  int64_t last_ns = 0;  // true time of the last packet offered
};

inline Flow flow(uint32_t engine, uint8_t b, uint16_t port, uint32_t id, double bps,
                 uint32_t min_bytes = 200, uint32_t max_bytes = 1400, int64_t start = kStartNs) {
  Flow f{engine, {10, b, 0, 9}, port, Source(id, 1000 + id, bps, min_bytes, max_bytes, start)};
  return f;
}

// Injects every flow's packets at their instants up to end_ns (true time), then runs to end_ns.
inline void drive(loopback::Gateway& g, std::vector<Flow>& flows, int64_t end_ns) {
  for (;;) {
    int64_t t = end_ns;
    for (const Flow& f : flows) t = std::min(t, f.source.next_ns());
    if (t >= end_ns) break;
    g.run_until(t);
    for (Flow& f : flows) {
      while (f.source.next_ns() == t) {
        uint64_t sequence = 0;
        const uint32_t bytes = f.source.take(&sequence);
        const Bytes packet = ipv4_packet(f.dst, f.port, bytes, {f.source.id(), sequence});
        f.last_ns = t;
        if (g.inject_tun(f.engine, packet) == common::Status::kOk) {
          ++f.accepted;
        } else {
          ++f.refused;
        }
      }
    }
  }
  g.run_until(end_ns);
}

// Every frame an engine emits must leave in its owner's slots (an oracle built from the
// configuration alone), at its scheduled instant, and never be handed back unsent.
class SlotChecker {
 public:
  explicit SlotChecker(loopback::Gateway& g) {
    for (uint32_t i = 0; i < g.engine_count(); ++i) {
      oracles_.emplace_back(wan1_gcl(g.engine(i).config()));
    }
  }
  void check(const loopback::TxRecord& r) {
    const TxEmit& e = r.emit;
    ++frames_;
    if (!e.send) {
      ++not_sent_;
      return;
    }
    const uint32_t owner = e.best_effort ? sched::testing::kUnreserved : e.header.tunnel_id;
    const std::string violation = oracles_[r.engine].check(owner, e.departure_ns, e.tx_end_ns);
    if (!violation.empty() && violations_.size() < 5) violations_.push_back(violation);
    if (e.departure_ns != r.engine_ns) ++late_departures_;
    SentKey key{r.engine, e.header.tunnel_id, e.best_effort};
    if (e.control) {
      control_bytes_[key] += e.wire_bytes;
      ++control_frames_[key];
      return;
    }
    sent_bytes_[key] += e.wire_bytes;
    ++sent_frames_[key];
  }
  void expect_clean() const {
    EXPECT_GT(frames_, 0u);
    EXPECT_TRUE(violations_.empty()) << violations_.front();
    EXPECT_EQ(not_sent_, 0u);
    EXPECT_EQ(late_departures_, 0u);
  }
  // Data bytes (on the wire) engine sent for tunnel in its own slots (or best effort).
  [[nodiscard]] uint64_t sent_bytes(uint32_t engine, uint32_t tunnel, bool best_effort) const {
    const auto it = sent_bytes_.find({engine, tunnel, best_effort});
    return it == sent_bytes_.end() ? 0 : it->second;
  }
  [[nodiscard]] uint64_t sent_frames(uint32_t engine, uint32_t tunnel, bool best_effort) const {
    const auto it = sent_frames_.find({engine, tunnel, best_effort});
    return it == sent_frames_.end() ? 0 : it->second;
  }
  // Control packets engine sent in tunnel's slots.
  [[nodiscard]] uint64_t control_bytes(uint32_t engine, uint32_t tunnel) const {
    const auto it = control_bytes_.find({engine, tunnel, false});
    return it == control_bytes_.end() ? 0 : it->second;
  }
  [[nodiscard]] uint64_t control_frames(uint32_t engine, uint32_t tunnel) const {
    const auto it = control_frames_.find({engine, tunnel, false});
    return it == control_frames_.end() ? 0 : it->second;
  }

 private:
  struct SentKey {
    uint32_t engine, tunnel;
    bool best_effort;
    auto operator<=>(const SentKey&) const = default;
  };
  std::vector<sched::testing::SlotOracle> oracles_;
  std::map<SentKey, uint64_t> sent_bytes_, sent_frames_, control_bytes_, control_frames_;
  std::vector<std::string> violations_;
  uint64_t frames_ = 0, not_sent_ = 0, late_departures_ = 0;
};

// Every delivered packet is marked (source, sequence): none may arrive twice.
class DeliveryLog {
 public:
  void add(const loopback::Delivery& d) {
    const Mark m = mark_of(d.payload);
    if (!seen_.insert({m.source, m.sequence}).second) ++repeated_;
    ++count_[m.source];
  }
  [[nodiscard]] uint64_t repeated() const { return repeated_; }
  [[nodiscard]] uint64_t count(uint32_t source) const {
    const auto it = count_.find(source);
    return it == count_.end() ? 0 : it->second;
  }

 private:
  std::set<std::pair<uint32_t, uint64_t>> seen_;
  std::map<uint32_t, uint64_t> count_;
  uint64_t repeated_ = 0;
};

}  // namespace detwan::dataplane::gw::testing
