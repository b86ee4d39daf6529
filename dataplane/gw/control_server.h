#pragma once
// The control channel of a running detwan-gw: a Unix stream socket served by the datapath
// thread itself, so it reads the engine without locks or cross-thread queues.
//
// Protocol: a client connects, sends one request line (a JSON object, '\n'-terminated or ended
// by shutting down its write side) and reads the answer until the gateway closes the
// connection. Requests (docs/gateway.md, "Control channel", has them all with examples):
//   {"cmd":"stats"}       -> Engine::stats_json (one JSON object)
//   {"cmd":"prometheus"}  -> Engine::prometheus_text (Prometheus text exposition format)
//   {"cmd":"config"}      -> describe(config): the configuration in force as YAML
//   {"cmd":"tunnels"}     -> Engine::tunnels_json: tunnels, peers, ports, generation, boot id
//   {"cmd":"apply",...}, add_tunnel, modify_tunnel, remove_tunnel -> Engine::apply_st; these
//                            write, and only an admin socket serves them
// Anything else is answered {"error":"..."} naming what was wrong. Every answer ends with '\n'.
//
// Two kinds of socket, one server each: the control socket (read-only; anyone who can reach it
// reads) and the admin socket (reads and writes): a filesystem path that has mode `mode` from
// the instant it exists (set on the descriptor before bind, bound in a private directory and
// renamed into place: never chmod on the final path), whose peers are checked with SO_PEERCRED
// on accept; a uid other than 0, the
// gateway's euid and `allowed_uids` is answered an error and closed before its request is read.
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
//
// Budget (docs/gateway.md, "The control channel's share of the datapath"): answering is the
// only costly part (a stats document is built from the engine, on this thread; a sharded
// gateway pauses its other shards meanwhile), so one poll_st() answers at most
// max_answers_per_poll requests and writes at most max_write_bytes_per_poll bytes; the rest
// waits for the next poll (counted `deferred` once per request). On the read-only socket each
// client uid (SO_PEERCRED) also gets at most client_requests_per_s answers per second after a
// burst of client_burst (GCRA, exact in integer ns): a request beyond it is held until its
// turn (counted `rate_limited`), not refused, so a polling script just slows down. A request
// still held at its deadline is answered {"error":"busy: ..."}. So a local client hammering
// `stats` costs the datapath at most client_requests_per_s answers per second per uid, and
// never more than one answer between two polls.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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

// Which socket a request came in on.
struct ControlChannel {
  bool admin = false;        // writes allowed
  std::string name;          // this socket, for messages
  std::string admin_socket;  // where writes go ("" = none configured), for the refusal
};

// The answer to one request line (without the trailing '\n'), as described above; counts it in
// engine.control_io(). Never throws: a malformed or refused request yields {"error":"..."}
// (writes: {"error":"...","generation":N}).
std::string answer_control_request(Engine& engine, std::string_view request, int64_t now_ns,
                                   const ControlChannel& channel = {});
// {"cmd":"prometheus"} over a gateway's shards (one shard: {&engine}): the whole exposition, or
// with "part":{"head":bool,"after_tunnel":ID,"max_tunnels":N} a part of it
// (Engine::PrometheusPart) that ends with the comment line kPrometheusMore + ID when tunnels
// above ID remain. Malformed: {"error":...} naming the field.
inline constexpr std::string_view kPrometheusMore = "# detwan-gw: more after_tunnel ";
std::string prometheus_answer(const std::vector<Engine*>& shards, std::string_view request,
                              int64_t now_ns);
// {"error": message} as one JSON line (without '\n'): every refusal of the control channel.
std::string control_error_json(std::string_view message);

struct ControlServerOptions {
  bool admin = false;  // an admin socket (see above); its name must be a filesystem path
  uint32_t mode = 0600;
  std::vector<uint32_t> allowed_uids;  // besides 0 and the gateway's euid
  size_t max_request_bytes = 4096;     // longer request lines are refused
  std::string admin_socket_hint;       // read-only socket: where writes go, for its refusal
  // The budget (above). The per-uid rate applies to the read-only socket only (the admin
  // socket's peers are authorised by uid); 0 = no rate.
  size_t max_answers_per_poll = 1;
  size_t max_write_bytes_per_poll = 256 * 1024;
  uint32_t client_requests_per_s = 50;
  uint32_t client_burst = 50;
};

class ControlServer {
 public:
  static constexpr int64_t kRequestTimeoutNs = 2'000'000'000;
  static constexpr size_t kMaxRequestBytes = 4096;
  // An apply may carry many tunnels; still bounded, like everything a client sends.
  static constexpr size_t kMaxAdminRequestBytes = 256 * 1024;
  static constexpr size_t kMaxConnections = 8;  // more wait in the listen backlog
  // Computes the answer to one request line (tests use their own; the gateway answers from the
  // engine with answer_control_request).
  using Responder = std::function<std::string(std::string_view request)>;

  // Binds and listens on `name` (see control_socket_name; "" is the default). Refuses a name a
  // live gateway listens on (kAlreadyExists); replaces a stale socket file nobody listens on;
  // refuses a path that exists and is not a socket. An admin server refuses an abstract or
  // relative name (kInvalidArgument); its file has options.mode before anyone can reach it
  // (control_server.cc, bind_admin_socket, says how), whatever the process umask.
  static common::Result<std::unique_ptr<ControlServer>> start(
      std::string_view name, const ControlServerOptions& options = {});
  ~ControlServer();  // closes every connection; unlinks a filesystem socket it created
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  [[nodiscard]] int fd() const noexcept { return listen_fd_.get(); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // Also true while a local request (submit) waits: the loop then polls soon.
  [[nodiscard]] bool has_connections() const noexcept {
    return !connections_.empty() || local_pending_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] bool admin() const noexcept { return options_.admin; }
  // Admin connections refused by uid since start.
  [[nodiscard]] uint64_t refused_peers() const noexcept { return refused_peers_; }
  // Requests that waited for a later poll (answer or byte budget) / for their uid's rate.
  [[nodiscard]] uint64_t deferred() const noexcept { return deferred_; }
  [[nodiscard]] uint64_t rate_limited() const noexcept { return rate_limited_; }

  // Serves the engine's requests (answer_control_request; refused peers are also counted in
  // engine.control_io()). Never blocks. Calls the heartbeat first, if set.
  void poll_st(Engine& engine, int64_t now_ns);
  // Called at every poll_st(engine, now) on the loop's thread: every backend's loop polls its
  // control socket at least every 10 ms, so this is the loop's heartbeat (the daemon tells
  // systemd it is ready at the first one and pings its watchdog from it).
  void set_heartbeat(std::function<void(int64_t now_ns)> heartbeat) {
    heartbeat_ = std::move(heartbeat);
  }
  // What answer_control_request needs to know about the request being answered: this socket,
  // or while a local admin request is answered (inside the responder), an admin channel.
  // Responders read it for each request.
  [[nodiscard]] ControlChannel channel() const;
  // Adds the refused peers, deferred and rate-limited requests since the last report to
  // engine.control_io().
  void report_counters(Engine& engine) noexcept;
  // The same with any responder.
  void poll_st(int64_t now_ns, const Responder& respond);

  // Local requests: from another thread of this process (the gateway's HTTP exporter,
  // dataplane/gw/metrics_server.h). Thread-safe. The request is answered at a coming poll on
  // the loop's thread with the same responder as the socket's requests (a sharded gateway's
  // merged answer too) and within the same per-poll budget, after the socket's connections;
  // `done` is then called on the loop's thread with the answer (it must be quick: hand the text
  // over). At most kMaxLocalRequests wait: submit() refuses more (returns false, `done` is not
  // called). Requests still waiting when the server is destroyed are answered
  // {"error":"stopping: ..."}.
  // Local requests are read-only unless submitted with `admin` (the process's own reload on
  // SIGHUP, detwan-gw run): such a request may write even on the read-only socket's server.
  using Done = std::function<void(std::string answer)>;
  static constexpr size_t kMaxLocalRequests = 16;
  bool submit(std::string request, Done done, bool admin = false);

 private:
  struct Connection {
    common::UniqueFd fd;
    int64_t deadline_ns = 0;
    bool answering = false;  // false: reading the request; true: writing `output`
    bool refused = false;    // admin: a peer whose uid may not use the socket
    bool deferred = false;   // counted in deferred_ (once per request)
    bool rate_limited = false;  // counted in rate_limited_ (once per request)
    uint32_t uid = 0;        // SO_PEERCRED at accept
    std::string input;
    std::string output;
    size_t written = 0;
  };
  // One client uid's rate (GCRA): the theoretical arrival time of its next answer.
  struct ClientRate {
    uint32_t uid = 0;
    bool used = false;
    int64_t tat_ns = 0;
    int64_t last_ns = 0;
  };
  static constexpr size_t kRatedClients = 16;  // least recently seen uid's entry is reused

  ControlServer(std::string name, common::UniqueFd listen_fd, ControlServerOptions options);
  void accept_pending(int64_t now_ns);
  // The peer's uid into *uid; admin: the refusal for a peer, or "" if it may use the socket.
  [[nodiscard]] std::string check_peer(int fd, uint32_t* uid) const;
  // Returns false when the connection is finished (to be closed).
  bool serve(Connection& connection, int64_t now_ns, const Responder& respond);
  // Writes what the socket and this poll's byte budget take; true when all is written or the
  // peer is gone.
  bool flush(Connection& connection);
  // True when `uid` may have an answer at now_ns (its token is then taken).
  bool client_admits(uint32_t uid, int64_t now_ns) noexcept;

  std::string name_;
  std::function<void(int64_t)> heartbeat_;
  common::UniqueFd listen_fd_;
  ControlServerOptions options_;
  std::vector<Connection> connections_;
  uint64_t refused_peers_ = 0;
  uint64_t deferred_ = 0;
  uint64_t rate_limited_ = 0;
  // Already added to an engine's control_io().
  uint64_t refused_peers_reported_ = 0, deferred_reported_ = 0, rate_limited_reported_ = 0;
  // This poll's budget.
  size_t answers_left_ = 0;
  size_t write_bytes_left_ = 0;
  std::array<ClientRate, kRatedClients> clients_{};
  // Local requests (submit), guarded by local_mutex_; local_pending_ says one waits.
  struct LocalRequest {
    std::string request;
    Done done;
    bool admin = false;
  };
  bool serving_local_admin_ = false;  // loop thread: a local admin request is being answered
  void serve_local(const Responder& respond);
  std::mutex local_mutex_;
  std::vector<LocalRequest> local_;
  std::atomic<bool> local_pending_{false};
};

// Client side: connects to `name` ("" = the default), sends `request` plus '\n' and returns the
// answer without its trailing newline (also when the gateway answered before reading the request,
// as an admin socket does to a refused peer). Errors name the socket:
//   "no detwan-gw listening on @detwan-gw: Connection refused" (kUnavailable),
//   "no answer from detwan-gw on @detwan-gw within 5000 ms" (kTimeout).
common::Result<std::string> control_request(std::string_view name, std::string_view request,
                                            int timeout_ms = 5000);

}  // namespace detwan::dataplane::gw
