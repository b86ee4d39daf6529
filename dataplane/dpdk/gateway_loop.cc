// The gateway's busy loops (one gateway, or one shard of several) and the run of several shards
// on their lcores. Per iteration: poll_once_st (gateway_datapath.cc), the control sockets at
// their cadence, the low-cpu idle sleep; a shard other than 0 also stops while shard 0 answers
// a control request.
#include <algorithm>

#include <fmt/format.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <time.h>

#include "common/clock.h"
#include "dataplane/dpdk/gateway_impl.h"
#include "dataplane/gw/control_server.h"
#include "dataplane/gw/shard_control.h"
#include "dataplane/gw/shard_sync.h"

namespace detwan::dataplane::dpdk {
namespace {

// The low-cpu idle sleep: until the engine's next event, at most the idle cap (a packet may
// arrive meanwhile; there is no descriptor to wait on).
void idle_sleep(const Gateway::Impl& impl, int64_t now_ns, int64_t last_work_ns) {
  int64_t sleep_ns = impl.engine.next_event_ns() - now_ns;
  const int64_t cap_ns = idle_sleep_cap_ns(now_ns - last_work_ns, impl.options.idle_sleep_ns,
                                           impl.options.idle_sleep_max_ns);
  if (sleep_ns > cap_ns) sleep_ns = cap_ns;
  if (sleep_ns > 0) {
    const timespec duration{0, static_cast<long>(sleep_ns)};
    (void)::clock_nanosleep(CLOCK_MONOTONIC, 0, &duration, nullptr);
  }
}

bool connected(const gw::ControlServer* control, const gw::ControlServer* admin) {
  return (control != nullptr && control->has_connections()) ||
         (admin != nullptr && admin->has_connections());
}

}  // namespace

void Gateway::run_st(std::atomic<bool>& stop, gw::ControlServer* control,
                     gw::ControlServer* admin) {
  Impl& impl = *impl_;
  const TscTaiClock clock;
  const bool low_cpu = impl.config.timing == gw::TimingMode::kLowCpu;
  if (low_cpu) common::set_min_timer_slack();  // idle sleeps wake within µs, not 50 µs late
  int64_t next_control_ns = 0;
  int64_t last_work_ns = clock.now_ns();
  while (!stop.load(std::memory_order_relaxed)) {
    const int64_t now_ns = clock.now_ns();
    const uint32_t work = poll_once_st(now_ns);
    if (work != 0) last_work_ns = now_ns;
    // The control socket is not watched by a descriptor here: poll it every interval, and
    // every iteration while a connection is open (its answer is being written).
    if ((control != nullptr || admin != nullptr) &&
        (now_ns >= next_control_ns || connected(control, admin))) {
      // A write on the admin socket may change the engine's tunnels here, between polls.
      if (control != nullptr) control->poll_st(impl.engine, now_ns);
      if (admin != nullptr) admin->poll_st(impl.engine, now_ns);
      next_control_ns = now_ns + impl.options.control_poll_interval_ns;
    }
    if (low_cpu && work == 0) idle_sleep(impl, clock.now_ns(), last_work_ns);
  }
}

void Gateway::run_shard_st(std::atomic<bool>& stop, const TscTaiClock& clock,
                           const std::vector<gw::Engine*>& engines, gw::ControlServer* control,
                           gw::ControlServer* admin) {
  Impl& impl = *impl_;
  SharedState& shared = *impl.shared;
  const bool low_cpu = impl.config.timing == gw::TimingMode::kLowCpu;
  if (low_cpu) common::set_min_timer_slack();
  const bool serves = impl.shard == 0 && (control != nullptr || admin != nullptr);
  int64_t next_control_ns = 0;
  int64_t last_work_ns = clock.now_ns();
  while (!stop.load(std::memory_order_relaxed)) {
    // Shard 0 is answering a control request: wait, touching nothing, until it is done.
    if (impl.shard != 0 && shared.pause->wait_if_requested(stop)) continue;
    const int64_t now_ns = clock.now_ns();
    const uint32_t work = poll_once_st(now_ns);
    if (work != 0) last_work_ns = now_ns;
    if (serves && (now_ns >= next_control_ns || connected(control, admin))) {
      for (gw::ControlServer* server : {control, admin}) {
        if (server == nullptr) continue;
        // The other shards are paused only while a request is answered, not for every poll.
        server->poll_st(now_ns, [&](std::string_view request) {
          const gw::PauseScope pause(*shared.pause, stop, {});
          return gw::answer_sharded_request(engines, request, now_ns, server->channel());
        });
        server->report_counters(impl.engine);
      }
      next_control_ns = now_ns + impl.options.control_poll_interval_ns;
    }
    if (low_cpu && work == 0) idle_sleep(impl, clock.now_ns(), last_work_ns);
  }
  if (impl.shard != 0) shared.pause->leave();
}

namespace {

struct ShardArgs {
  Gateway* gateway = nullptr;
  std::atomic<bool>* stop = nullptr;
  const TscTaiClock* clock = nullptr;
  const std::vector<gw::Engine*>* engines = nullptr;
  gw::ControlServer* control = nullptr;
  gw::ControlServer* admin = nullptr;
};

int shard_on_lcore(void* arg) {
  const auto* args = static_cast<const ShardArgs*>(arg);
  args->gateway->run_shard_st(*args->stop, *args->clock, *args->engines, args->control,
                              args->admin);
  return 0;
}

}  // namespace

common::Result<void> run_shards(std::vector<std::unique_ptr<Gateway>>& shards,
                                const std::vector<gw::Engine*>& engines,
                                const std::vector<uint32_t>& lcores, std::atomic<bool>& stop,
                                gw::ControlServer* control, gw::ControlServer* admin) {
  const auto count = static_cast<uint32_t>(shards.size());
  if (count == 0 || lcores.size() != count || engines.size() != count) {
    return common::make_error(
        common::ErrorCode::kInvalidArgument,
        fmt::format("field 'dpdk.lcores': {} lcores for {} shards", lcores.size(), count));
  }
  const unsigned main_lcore = rte_get_main_lcore();
  for (uint32_t k = 0; k < count; ++k) {
    if (!rte_lcore_is_enabled(lcores[k])) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("field 'dpdk.lcores': lcore {} is not enabled by dpdk.eal (-l/--lcores)",
                      lcores[k]));
    }
    if (k > 0 && lcores[k] == main_lcore) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("field 'dpdk.lcores': the main lcore {} can only run shard 0 (first in "
                      "the list)",
                      main_lcore));
    }
  }
  SharedState& shared = *shards[0]->impl_->shared;
  shared.pause = std::make_unique<gw::ShardPause>(count);
  const TscTaiClock clock;
  std::vector<ShardArgs> args(count);
  common::Result<void> outcome;
  for (uint32_t k = 0; k < count; ++k) {
    args[k] =
        ShardArgs{shards[k].get(),         &stop, &clock, &engines, k == 0 ? control : nullptr,
                  k == 0 ? admin : nullptr};
    if (lcores[k] == main_lcore) continue;  // shard 0 on the calling thread, below
    if (rte_eal_remote_launch(shard_on_lcore, &args[k], lcores[k]) != 0) {
      outcome = common::make_error(common::ErrorCode::kUnavailable,
                                   fmt::format("field 'dpdk.lcores': lcore {} is busy", lcores[k]));
      stop.store(true);
      for (uint32_t never = std::max(k, 1u); never < count; ++never) shared.pause->leave();
      break;
    }
  }
  if (outcome && lcores[0] == main_lcore) (void)shard_on_lcore(&args[0]);
  for (uint32_t k = 0; k < count; ++k) {
    if (lcores[k] != main_lcore) (void)rte_eal_wait_lcore(lcores[k]);
  }
  return outcome;
}

}  // namespace detwan::dataplane::dpdk
