#pragma once
// What the shards of one gateway (shard.h) share at run time, whatever the backend: the peers'
// control state their leads publish, and the pause during which shard 0 answers a control
// request for the whole gateway (shard_control.h). Both are off the per-packet path.
//
// PeerBoards   per peer, the lead's last gw::PeerSync. sync_st() runs on each shard's own
//              thread (at most every kPeerSyncIntervalNs, or each loop turn): it publishes the
//              peers that shard leads and adopts the others'. A try-lock on each board: a shard
//              never waits for another; a board busy this turn is synced on the next.
// ShardPause   shard 0 calls pause_others() before it answers and resume() after (PauseScope);
//              every other shard calls wait_if_requested() at the top of each loop turn and
//              leave() once its loop ended (or never started). While the scope lives, every
//              shard still running waits inside wait_if_requested(), touching none of its
//              state, so shard 0 may read and change every shard's engine. The mutex orders
//              those accesses (a shard's writes before it counts itself paused; shard 0's
//              before resume()). `wake` is called once per pause for a backend whose shards
//              sleep (the uring backend's eventfds); returns at `stop` too.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "dataplane/gw/engine.h"
#include "dataplane/gw/shard.h"

namespace detwan::dataplane::gw {

inline constexpr int64_t kPeerSyncIntervalNs = 100'000;

class PeerBoards {
 public:
  explicit PeerBoards(uint32_t peers);
  // Publishes the peers `engine` leads and adopts the others' last publication (owner thread of
  // `engine`; never blocks).
  void sync_st(Engine& engine) noexcept;

 private:
  struct Board {
    std::mutex mutex;
    PeerSync sync;
    bool published = false;
  };
  std::vector<std::unique_ptr<Board>> boards_;
};

class ShardPause {
 public:
  explicit ShardPause(uint32_t shards) : running_(shards > 0 ? shards - 1 : 0) {}

  // Shard 0. Returns once every other running shard waits (or at stop).
  void pause_others(const std::atomic<bool>& stop, const std::function<void()>& wake);
  void resume();
  // Shards k > 0, each loop turn: false at once when no pause is asked; else waits until it
  // ends (or stop) and returns true.
  bool wait_if_requested(const std::atomic<bool>& stop);
  void leave();

 private:
  std::atomic<bool> requested_flag_{false};  // the loop's cheap check
  std::mutex mutex_;
  std::condition_variable changed_;
  bool requested_ = false;
  uint32_t paused_ = 0;
  uint32_t running_;
};

// pause_others() for its lifetime.
class PauseScope {
 public:
  PauseScope(ShardPause& pause, const std::atomic<bool>& stop, const std::function<void()>& wake)
      : pause_(pause) {
    pause_.pause_others(stop, wake);
  }
  ~PauseScope() { pause_.resume(); }
  PauseScope(const PauseScope&) = delete;
  PauseScope& operator=(const PauseScope&) = delete;

 private:
  ShardPause& pause_;
};

}  // namespace detwan::dataplane::gw
