#pragma once
// The control channel of a running detwan-gw: a Unix stream socket served by the datapath
// thread itself, so it reads the engine without locks or cross-thread queues.
//
// Protocol: a client connects, sends one request line (a JSON object, '\n'-terminated or ended
// by shutting down its write side) and reads the answer until the gateway closes the
// connection. Requests:
//   {"cmd":"stats"}       -> Engine::stats_json (one JSON object)
//   {"cmd":"prometheus"}  -> Engine::prometheus_text (Prometheus text exposition format)
//   {"cmd":"config"}      -> describe(config): the effective configuration as YAML
// Anything else is answered {"error":"..."} naming what was wrong. Every answer ends with '\n'.
//
// Names: a filesystem path ("/run/detwan-gw.sock"), or "@name" for an abstract socket, which
// lives in the network namespace and vanishes with the process. The configured "" means
// kDefaultControlSocket, so `detwan-gw stats` run in the gateway's namespace finds it.
//
// Threading and blocking: start() and the destructor are setup code. poll_st() runs on the
// datapath thread and never blocks: it accepts what is pending, reads what has arrived, answers
// complete requests, writes as much as the socket takes, and closes finished connections and
// those whose deadline (kRequestTimeoutNs from accept, and again from the answer) has passed.
// The loop calls it when fd() is readable, at least every 10 ms, and more often while
// has_connections() (a connection's own socket is not watched by the loop).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace detwan::dataplane::gw {

class Engine;

inline constexpr std::string_view kDefaultControlSocket = "@detwan-gw";

// The socket name a configured value stands for: "" -> kDefaultControlSocket, else unchanged.
std::string control_socket_name(std::string_view configured);

// The answer to one request line (without the trailing '\n'), as described above. Never throws
// for bad input: a malformed request yields {"error":"..."}.
std::string answer_control_request(Engine& engine, std::string_view request, int64_t now_ns);

class ControlServer {
 public:
  static constexpr int64_t kRequestTimeoutNs = 2'000'000'000;
  static constexpr size_t kMaxRequestBytes = 4096;
  static constexpr size_t kMaxConnections = 8;  // more wait in the listen backlog
  // Computes the answer to one request line (tests use their own; the gateway answers from the
  // engine with answer_control_request).
  using Responder = std::function<std::string(std::string_view request)>;

  // Binds and listens on `name` (see control_socket_name; "" is the default). Refuses a name a
  // live gateway listens on (kAlreadyExists); replaces a stale socket file nobody listens on;
  // refuses a path that exists and is not a socket.
  static common::Result<std::unique_ptr<ControlServer>> start(std::string_view name);
  ~ControlServer();  // closes every connection; unlinks a filesystem socket it created
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  [[nodiscard]] int fd() const noexcept { return listen_fd_.get(); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] bool has_connections() const noexcept { return !connections_.empty(); }

  // Serves the engine's requests (answer_control_request). Never blocks.
  void poll_st(Engine& engine, int64_t now_ns);
  // The same with any responder.
  void poll_st(int64_t now_ns, const Responder& respond);

 private:
  struct Connection {
    common::UniqueFd fd;
    int64_t deadline_ns = 0;
    bool answering = false;  // false: reading the request; true: writing `output`
    std::string input;
    std::string output;
    size_t written = 0;
  };

  ControlServer(std::string name, common::UniqueFd listen_fd);
  void accept_pending(int64_t now_ns);
  // Returns false when the connection is finished (to be closed).
  bool serve(Connection& connection, int64_t now_ns, const Responder& respond);
  static bool flush(Connection& connection);

  std::string name_;
  common::UniqueFd listen_fd_;
  std::vector<Connection> connections_;
};

// Client side: connects to `name` ("" = the default), sends `request` plus '\n' and returns the
// answer without its trailing newline. Errors name the socket:
//   "no detwan-gw listening on @detwan-gw: Connection refused" (kUnavailable),
//   "no answer from detwan-gw on @detwan-gw within 5000 ms" (kTimeout).
common::Result<std::string> control_request(std::string_view name, std::string_view request,
                                            int timeout_ms = 5000);

}  // namespace detwan::dataplane::gw
