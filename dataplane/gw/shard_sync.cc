// Run-time state the shards share (shard_sync.h).
#include "dataplane/gw/shard_sync.h"

#include <chrono>

namespace detwan::dataplane::gw {
namespace {

// Waits re-check `stop` this often (nobody notifies on stop).
constexpr auto kStopCheck = std::chrono::milliseconds(1);

}  // namespace

PeerBoards::PeerBoards(uint32_t peers) {
  for (uint32_t i = 0; i < peers; ++i) boards_.push_back(std::make_unique<Board>());
}

void PeerBoards::sync_st(Engine& engine) noexcept {
  const uint32_t count = std::min<uint32_t>(engine.peer_count(), boards_.size());
  for (uint32_t i = 0; i < count; ++i) {
    Board& board = *boards_[i];
    std::unique_lock lock(board.mutex, std::try_to_lock);
    if (!lock.owns_lock()) continue;
    if (engine.leads_peer(i)) {
      board.sync = engine.peer_sync_st(i);
      board.published = true;
    } else if (board.published) {
      engine.adopt_peer_st(i, board.sync);
    }
  }
}

void ShardPause::pause_others(const std::atomic<bool>& stop, const std::function<void()>& wake) {
  {
    std::unique_lock lock(mutex_);
    // A pause that just ended: every shard leaves it first, so `paused_` counts this one only.
    while (paused_ != 0 && !stop.load()) changed_.wait_for(lock, kStopCheck);
    requested_ = true;
    requested_flag_.store(true, std::memory_order_release);
  }
  if (wake) wake();
  std::unique_lock lock(mutex_);
  while (paused_ < running_ && !stop.load()) changed_.wait_for(lock, kStopCheck);
}

void ShardPause::resume() {
  {
    std::lock_guard lock(mutex_);
    requested_ = false;
    requested_flag_.store(false, std::memory_order_release);
  }
  changed_.notify_all();
}

bool ShardPause::wait_if_requested(const std::atomic<bool>& stop) {
  if (!requested_flag_.load(std::memory_order_acquire)) return false;
  std::unique_lock lock(mutex_);
  ++paused_;
  changed_.notify_all();
  while (requested_ && !stop.load()) changed_.wait_for(lock, kStopCheck);
  --paused_;
  changed_.notify_all();
  return true;
}

void ShardPause::leave() {
  {
    std::lock_guard lock(mutex_);
    if (running_ > 0) --running_;
  }
  changed_.notify_all();
}

}  // namespace detwan::dataplane::gw
