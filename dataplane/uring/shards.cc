// Setup and run of the io_uring backend's shards (shards.h).
#include "dataplane/uring/shards.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/logging.h"
#include "dataplane/uring/datapath.h"

namespace detwan::dataplane::uring {

ShardGroup::ShardGroup(uint32_t shard_count, uint32_t peer_count, uint32_t slot_bytes)
    : count(shard_count), peers(peer_count), pause(shard_count) {
  const uint32_t slots =
      std::bit_floor(std::max<uint32_t>(64, kDispatchSlotsPerShard / std::max(count - 1, 1u)));
  rings.resize(std::size_t{count} * count);
  for (uint32_t from = 0; from < count; ++from) {
    for (uint32_t to = 0; to < count; ++to) {
      if (from != to) {
        rings[std::size_t{from} * count + to] = std::make_unique<DispatchRing>(slots, slot_bytes);
      }
    }
  }
  for (uint32_t k = 0; k < count; ++k) {
    wake_fds.emplace_back(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  }
}

void ShardGroup::wake(uint32_t k) const noexcept {
  const uint64_t one = 1;
  (void)!::write(wake_fds[k].get(), &one, sizeof one);  // EAGAIN only at a 2^64 - 2 backlog
}

std::string ShardGroup::counters_json() const {
  std::string out = "[";
  for (uint32_t k = 0; k < count; ++k) {
    const ShardCounters& c = states[k]->counters;
    out += fmt::format(
        R"({}{{"shard":{},"cpu":{},"loop_iterations":{},"tun_dispatched":{},"wan_misdirected":{},)"
        R"("dispatched":{},"dispatch_dropped":{},"dispatch_received":{},"dispatch_no_buffer":{}}})",
        k == 0 ? "" : ",", k, states[k]->cpu, c.loop_iterations, c.tun_dispatched,
        c.wan_misdirected, c.dispatched, c.dispatch_dropped, c.dispatch_received,
        c.dispatch_no_buffer);
  }
  return out + "]";
}

common::Result<void> Datapath::prepare_shard() {
  group_ = state_.group;
  if (group_ == nullptr) return {};
  const gw::ShardSpec& spec = engine_.shard();
  if (spec.index != state_.shard || spec.count != group_->count) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("uring gateway: shard {} of {} was given an engine created as shard {} of {}",
                    state_.shard, group_->count, spec.index, spec.count));
  }
  for (const common::UniqueFd& fd : group_->wake_fds) {
    if (!fd.valid()) {
      return common::make_error(
          common::ErrorCode::kIo,
          fmt::format("uring gateway: eventfd for the shards' wake-ups: {}", std::strerror(errno)));
    }
  }
  return {};
}

common::Result<void> run_shards(GatewayShards& shards, gw::RunContext& context) {
  ShardGroup& group = *shards.group;
  const uint32_t count = group.count;
  const gw::ShardSpec first = context.engine.shard();
  if (first.index != 0 || first.count != count || first.epoch == 0) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("field 'gateway.shards' is {} but the engine was created as shard {} of {}"
                    "{}: create it with gw::ShardSpec{{0, {}, epoch != 0}}",
                    count, first.index, first.count, first.epoch == 0 ? " without an epoch" : "",
                    count));
  }
  const int64_t now_ns = common::TaiClock().now_ns();
  shards.engines.clear();
  group.engines = {&context.engine};
  for (uint32_t k = 1; k < count; ++k) {
    auto engine = gw::Engine::create(context.config, now_ns, gw::ShardSpec{k, count, first.epoch});
    if (!engine) return std::unexpected(engine.error());
    group.engines.push_back(engine->get());
    shards.engines.push_back(std::move(*engine));
  }
  auto log = common::logger("uring");
  std::vector<int> cpus;
  for (const auto& state : shards.states) cpus.push_back(state->cpu);
  log->info("{} shards on threads pinned to [{}] (-1: not pinned); tunnel id mod {} owns a tunnel",
            count, fmt::join(cpus, ", "), count);

  std::vector<std::unique_ptr<gw::RunContext>> contexts;
  for (uint32_t k = 1; k < count; ++k) {
    contexts.push_back(std::make_unique<gw::RunContext>(
        gw::RunContext{*shards.engines[k - 1], context.config, nullptr, context.stop, nullptr}));
  }
  std::vector<common::Result<void>> outcomes(count);
  std::vector<std::thread> threads;
  for (uint32_t k = 1; k < count; ++k) {
    threads.emplace_back([&, k] {
      outcomes[k] = run_datapath(*shards.states[k], *contexts[k - 1]);
      group.pause.leave();
      if (!outcomes[k]) context.stop.store(true);  // one shard down stops the gateway
    });
  }
  outcomes[0] = run_datapath(*shards.states[0], context);
  if (!outcomes[0]) context.stop.store(true);
  for (std::thread& thread : threads) thread.join();
  for (uint32_t k = 0; k < count; ++k) {
    if (!outcomes[k]) return std::unexpected(outcomes[k].error());
  }
  log->info("uring backend counters per shard: {}", group.counters_json());
  return {};
}

}  // namespace detwan::dataplane::uring
