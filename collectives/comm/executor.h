#pragma once
// The communicator's executor: one thread that runs submitted tasks strictly in submission
// order (the ordering contract of collectives.h needs every rank to run its operations in
// issue order), completing each task's Request::State with the task's result.
//
// Threading: post() from any thread; tasks run on the executor thread only. The destructor
// runs every task already posted, then joins (a pending Request is never abandoned).
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "collectives/comm/communicator.h"
#include "common/post_queue.h"

namespace detwan::collectives {

class Executor {
 public:
  using Task = std::function<Result<void>()>;

  Executor();
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Queues `task`; `state` completes with its result once it has run.
  void post(Task task, std::shared_ptr<Request::State> state);

 private:
  using Item = std::pair<Task, std::shared_ptr<Request::State>>;
  void loop();

  common::PostQueue<Item> queue_;  // the loop blocks in wait_drain_st (no other wake-up)
  std::thread thread_;             // last: starts after the queue exists
};

}  // namespace detwan::collectives
