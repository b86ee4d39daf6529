#pragma once
// One thread's job queue: any thread posts a job, the thread that owns the queue (a progress,
// poll or executor thread) takes them in posting order. The one primitive for "run this on that
// thread" (issue 37): the datagram and shm transports' progress threads, the verbs channels, the
// WAN emulator's poll thread and the communicator's executor use it.
//
// Waking the owner is the owner's business: an event loop passes `wake` (write its eventfd),
// a thread with nothing else to wait on blocks in wait_drain_st(). `wake` runs under the queue's
// lock (so never after close() returned) and only when the queue goes from empty to not empty
// by another thread's post: a post from the owner itself (a completion callback posting more
// work) needs no wake-up, because the owner drains before it sleeps.
//
// Ownership: set_owner() names the owning thread; the *_st calls assert that they run on it in
// builds with assertions (every test build), so a job taken on the wrong thread fails loudly.
//
// Threading: post(), close(), empty() and pending() from any thread; drain_st() and
// wait_drain_st() on the owner only. Jobs never run inside the queue: the owner runs what it
// took, outside the lock.
#include <atomic>
#include <cassert>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace detwan::common {

template <typename Job>
class PostQueue {
 public:
  explicit PostQueue(std::function<void()> wake = {}) : wake_(std::move(wake)) {}
  PostQueue(const PostQueue&) = delete;
  PostQueue& operator=(const PostQueue&) = delete;

  // Queues `job` and wakes the owner. After close() it returns false and leaves `job` untouched,
  // so that the caller completes it itself (there is no owner left to run it).
  [[nodiscard]] bool post(Job& job) {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    jobs_.push_back(std::move(job));
    if (jobs_.size() == 1) {
      pending_.store(true, std::memory_order_release);
      if (!on_owner()) wake_locked();
    }
    return true;
  }
  [[nodiscard]] bool post(Job&& job) { return post(job); }

  // The thread the *_st calls run on (call it first thing on that thread).
  void set_owner(std::thread::id id) noexcept { owner_.store(id, std::memory_order_release); }
  [[nodiscard]] bool on_owner() const noexcept {
    return owner_.load(std::memory_order_acquire) == std::this_thread::get_id();
  }

  // Jobs are queued (a lock-free hint for a poll loop; exact under the lock).
  [[nodiscard]] bool pending() const noexcept { return pending_.load(std::memory_order_acquire); }
  [[nodiscard]] bool empty() const {
    std::lock_guard lock(mutex_);
    return jobs_.empty();
  }
  [[nodiscard]] bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  // Owner only: appends every queued job to `out` (a container with push_back), posting order.
  template <typename Out>
  void drain_st(Out& out) {
    assert(on_owner() && "PostQueue::drain_st off its owning thread");
    std::lock_guard lock(mutex_);
    take_locked(out);
  }

  // Owner only: blocks until a job is queued or the queue is closed, then drains like
  // drain_st(). False when the queue is closed and nothing is left: the owner may finish.
  template <typename Out>
  bool wait_drain_st(Out& out) {
    assert(on_owner() && "PostQueue::wait_drain_st off its owning thread");
    std::unique_lock lock(mutex_);
    waiting_ = true;
    ready_.wait(lock, [&] { return !jobs_.empty() || closed_; });
    waiting_ = false;
    if (jobs_.empty()) return false;
    take_locked(out);
    return true;
  }

  // No further posts are accepted; what is queued stays for the owner to drain (an executor
  // finishing its work), and the owner is woken to see it.
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    wake_locked();
  }
  // No further posts are accepted; what was still queued moves to `out` for the caller to
  // complete (the owner has stopped or is stopping). Any thread.
  template <typename Out>
  void close(Out& out) {
    std::lock_guard lock(mutex_);
    closed_ = true;
    take_locked(out);
  }

 private:
  // Into an empty vector the jobs move by a swap: both sides keep their capacity, so a steady
  // stream of posts and drains allocates nothing (the datapath drains into such a vector).
  template <typename Out>
  void take_locked(Out& out) {
    if constexpr (std::is_same_v<Out, std::vector<Job>>) {
      if (out.empty()) {
        out.swap(jobs_);
        pending_.store(false, std::memory_order_release);
        return;
      }
    }
    for (Job& job : jobs_) out.push_back(std::move(job));
    jobs_.clear();
    pending_.store(false, std::memory_order_release);
  }
  void wake_locked() {
    if (waiting_) ready_.notify_one();
    if (wake_) wake_();
  }

  mutable std::mutex mutex_;
  std::condition_variable ready_;  // wait_drain_st's owner
  std::vector<Job> jobs_;          // guarded by mutex_
  bool closed_ = false;            // guarded by mutex_
  bool waiting_ = false;           // guarded by mutex_: the owner is in wait_drain_st
  std::atomic<bool> pending_{false};
  std::atomic<std::thread::id> owner_{};
  std::function<void()> wake_;  // called under mutex_, so never after close() returned
};

}  // namespace detwan::common
