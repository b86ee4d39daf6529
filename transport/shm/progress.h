#pragma once
// The progress thread of one shm endpoint. It owns every ChannelState of the endpoint, moves
// their bytes, runs their completions, and sleeps in ppoll() on: a control eventfd (posted API
// calls), each channel's doorbell eventfd (the peer published something) and each channel's
// Unix socket (hang-up = peer gone), with a timeout for heartbeats and peer timeouts.
//
// API calls from any thread are posted (post()); a post from the progress thread itself (a
// completion callback calling send_async) skips the eventfd write, the loop drains the queue
// before it sleeps. The thread starts with the first post, so an endpoint that only listens
// has no thread (and a process may fork() after listen()).
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <poll.h>

#include "common/post_queue.h"
#include "common/unique_fd.h"
#include "transport/shm/channel_state.h"

namespace detwan::transport::shm {

struct Op {
  enum class Kind : uint8_t { kAdd, kSend, kRecv, kClose };
  Kind kind = Kind::kAdd;
  std::shared_ptr<ChannelState> channel;
  std::span<const std::byte> message;
  SendCallback send_done;
  RecvCallback recv_done;
};

class Progress : public std::enable_shared_from_this<Progress> {
 public:
  // `control_fd`: a non-blocking eventfd, owned from now on.
  explicit Progress(common::UniqueFd control_fd);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Thread-safe, never blocks. False once stop() was called: `op` is left untouched and the
  // caller completes it.
  [[nodiscard]] bool post(Op&& op);
  // Fails every channel with kUnavailable "shm: endpoint closed" (their callbacks run on the
  // progress thread) and joins it. Idempotent. From the progress thread itself it only asks
  // the loop to finish.
  void stop();

 private:
  void run_st();
  void apply_st(Op& op);
  void sleep_st();
  void wake() noexcept;  // writes the control eventfd

  common::UniqueFd control_fd_;
  common::PostQueue<Op> queue_;  // API calls for the progress thread (wakes it via control_fd_)
  std::mutex mutex_;
  bool stopping_ = false;      // guarded by mutex_
  std::thread thread_;         // guarded by mutex_ (started by the first post)
  std::thread::id thread_id_;  // guarded by mutex_

  // Progress thread only.
  std::vector<std::shared_ptr<ChannelState>> channels_;
  std::vector<Op> batch_;
  std::vector<pollfd> poll_fds_;
};

}  // namespace detwan::transport::shm
