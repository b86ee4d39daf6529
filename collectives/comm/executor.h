#pragma once
// The communicator's executor: one thread that runs submitted tasks strictly in submission
// order (the ordering contract of collectives.h needs every rank to run its operations in
// issue order), completing each task's Request::State with the task's result.
//
// Threading: post() from any thread; tasks run on the executor thread only. The destructor
// runs every task already posted, then joins (a pending Request is never abandoned).
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "collectives/comm/communicator.h"

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
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<Task, std::shared_ptr<Request::State>>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the queue exists
};

}  // namespace detwan::collectives
