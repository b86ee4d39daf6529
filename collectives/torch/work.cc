#include "collectives/torch/work.h"

#include <stdexcept>
#include <utility>

#include <ATen/core/jit_type.h>

namespace detwan::torch_backend {

DetwanWork::DetwanWork(int rank, c10d::OpType type, const char* what,
                       std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      what_(what),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

void DetwanWork::complete(std::exception_ptr error) {
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

Completer::Completer(
    std::function<std::string(const DetwanWork&, const common::Error&)> describe_failure)
    : describe_failure_(std::move(describe_failure)), thread_([this] { run(); }) {}

Completer::~Completer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Completer::enqueue(collectives::Request request, c10::intrusive_ptr<DetwanWork> work,
                        std::function<void()> epilogue, std::vector<at::Tensor> keep) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Pending{std::move(request), std::move(work), std::move(epilogue),
                             std::move(keep)});
  }
  cv_.notify_one();
}

void Completer::fail_now(DetwanWork& work, const std::string& message) {
  work.complete(std::make_exception_ptr(std::runtime_error(message)));
}

void Completer::run() {
  for (;;) {
    Pending next;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    // The communicator's own per-operation timeout bounds this wait (the process group's).
    auto status = next.request.wait(-1);
    std::exception_ptr error;
    if (!status.has_value()) {
      error = std::make_exception_ptr(std::runtime_error(
          std::string("detwan ") + next.work->what() + ": the request did not complete"));
    } else if (!status->has_value()) {
      error = std::make_exception_ptr(
          std::runtime_error(describe_failure_(*next.work, status->error())));
    } else if (next.epilogue) {
      try {
        next.epilogue();
      } catch (...) {
        error = std::current_exception();
      }
    }
    next.keep.clear();
    next.work->complete(error);
  }
}

}  // namespace detwan::torch_backend
