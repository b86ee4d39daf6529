#pragma once
// One io_context and the progress thread that runs it. Shared (shared_ptr) by an endpoint and
// every channel it created, so sockets never outlive their io_context.
//
// Destruction: posts a stop behind everything already posted (closes queued by channel and
// endpoint destructors run first), then joins. If the last owner is dropped on the progress
// thread itself (from a callback), the thread is detached instead; the io_context stays alive
// until run() returns because the thread holds its own reference.
#include <memory>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

namespace detwan::transport::tcp {

class IoThread {
 public:
  IoThread();
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  [[nodiscard]] boost::asio::io_context& context() { return *io_; }
  [[nodiscard]] bool on_progress_thread() const {
    return std::this_thread::get_id() == thread_.get_id();
  }

 private:
  std::shared_ptr<boost::asio::io_context> io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace detwan::transport::tcp
