#pragma once
// The Work objects the detwan process group returns, and the thread that completes them.
//
// Every operation is submitted to the communicator at once (Communicator::submit) and runs on
// its executor in issue order; a Completer thread per process group waits for the Requests in
// the same order, runs the operation's epilogue (copies out of staging buffers) and then
// completes the Work and its Future. DDP chains its bucket callbacks on that Future.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "collectives/comm/communicator.h"

namespace detwan::torch_backend {

class DetwanWork : public c10d::Work {
 public:
  // `outputs`: the tensors the Future completes with (DDP reads them back from it).
  DetwanWork(int rank, c10d::OpType type, const char* what, std::vector<at::Tensor> outputs);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  [[nodiscard]] const char* what() const { return what_; }

  // Completes the Work, then its Future (success when `error` is null).
  void complete(std::exception_ptr error);

 private:
  const char* what_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Waits for submitted operations in issue order and completes their Work.
class Completer {
 public:
  // `describe_failure`: turns a failed operation's error into the exception's message (names
  // the operation, this rank and the failed peer).
  explicit Completer(std::function<std::string(const DetwanWork&, const common::Error&)>
                         describe_failure);
  ~Completer();  // waits for everything queued, then stops
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  // `epilogue` runs on the completer thread after the request succeeded and before the Work
  // completes (copy results out of staging tensors); an exception from it fails the Work.
  // `keep` holds tensors the request reads or writes until it is done.
  void enqueue(collectives::Request request, c10::intrusive_ptr<DetwanWork> work,
               std::function<void()> epilogue, std::vector<at::Tensor> keep);
  // Completes `work` at once with an error (a failure found before anything was submitted).
  static void fail_now(DetwanWork& work, const std::string& message);

 private:
  struct Pending {
    collectives::Request request;
    c10::intrusive_ptr<DetwanWork> work;
    std::function<void()> epilogue;
    std::vector<at::Tensor> keep;
  };
  void run();

  std::function<std::string(const DetwanWork&, const common::Error&)> describe_failure_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace detwan::torch_backend
