#include "transport/tcp/io_thread.h"

#include <boost/asio/post.hpp>

namespace detwan::transport::tcp {

IoThread::IoThread()
    : io_(std::make_shared<boost::asio::io_context>(1)),
      work_(boost::asio::make_work_guard(*io_)),
      thread_([io = io_] { io->run(); }) {}

IoThread::~IoThread() {
  work_.reset();
  if (on_progress_thread()) {
    io_->stop();
    thread_.detach();
    return;
  }
  // FIFO on a single-threaded io_context: handlers posted before this one (channel closes)
  // run first, so every user callback has been called when the thread ends.
  boost::asio::post(*io_, [io = io_.get()] { io->stop(); });
  thread_.join();
}

}  // namespace detwan::transport::tcp
