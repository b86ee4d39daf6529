#pragma once
// Control channel of a running detwan-wanem: a Unix stream socket carrying one JSON request line
// and one JSON response line per connection (protocol in docs/wanem.md).
//
// ControlServer runs its own thread (the control thread). It never touches the emulation state:
// each request is posted to the poll thread through the PostQueue and the answer is waited for
// (bounded by kReplyTimeoutMs). One connection is served at a time; requests are rare.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/status.h"
#include "common/unique_fd.h"
#include "tools/wanem/post_queue.h"

namespace detwan::wanem {

using common::UniqueFd;  // the project's one RAII fd owner (common/unique_fd.h)

class ControlServer {
 public:
  static constexpr int kReplyTimeoutMs = 5000;
  static constexpr int kRequestTimeoutMs = 2000;
  static constexpr size_t kMaxRequestBytes = 64 * 1024;
  static constexpr size_t kMaxAnswerBytes = 16 * 1024 * 1024;  // what control_request() reads

  // Binds `path` (replacing a stale socket file nobody listens on; refusing a live one) and
  // starts the control thread.
  static common::Result<std::unique_ptr<ControlServer>> start(const std::string& path,
                                                              PostQueue& posts);
  ~ControlServer();  // stops the thread and unlinks the socket file
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

 private:
  ControlServer(std::string path, UniqueFd listen_fd, UniqueFd stop_fd, PostQueue& posts);
  void serve_ct();  // control thread
  void handle_connection_ct(int fd);

  std::string path_;
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // eventfd: written by the destructor to end serve_ct()
  PostQueue& posts_;
  std::thread thread_;
};

// Client side: sends one request object and returns the response text (common::unix_request).
// Errors name the path: "no detwan-wanem listening on /run/wanem.sock: Connection refused",
// "no answer from detwan-wanem on /run/wanem.sock within 10000 ms".
common::Result<std::string> control_request(const std::string& path, std::string_view request,
                                            int timeout_ms = 10000);

}  // namespace detwan::wanem
