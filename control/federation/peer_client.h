#pragma once
// Calls from this domain's coordinator to other domains' agents (docs/federation.md), over
// HTTP(S) with the peer's CA, our client certificate and, optionally, a bearer token per peer
// (federation.peers[].token_file). A FaultInjector (tests) refuses, times out or drops chosen
// calls by domain and phase.
//
// Threading: call() is thread-safe; each peer's connections are kept alive and reused
// (client::HttpConnectionPool: no TCP or TLS handshake per call), a deadline of call_timeout.
// Errors: a transport failure is status 0 with `error` naming the peer and its URL, and
// `timed_out` when the deadline passed.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/status.h"
#include "control/client/http_client.h"
#include "control/model/topology.h"

namespace detwan::control::federation {

struct PeerAnswer {
  int status = 0;  // 0: no answer (see error)
  boost::json::object body;
  std::string body_error;  // "is not JSON" / "is not a JSON object" ("" : body is the object)
  std::string error;
  bool timed_out = false;
};

class PeerClient {
 public:
  virtual ~PeerClient() = default;
  virtual PeerAnswer call(const std::string& domain, const std::string& method,
                          const std::string& path, const std::string& body) = 0;
};

class HttpPeerClient final : public PeerClient {
 public:
  // Reads the peers' token files; errors name the file.
  static common::Result<std::unique_ptr<HttpPeerClient>> create(const model::Topology& topology);
  PeerAnswer call(const std::string& domain, const std::string& method, const std::string& path,
                  const std::string& body) override;

 private:
  struct Peer {
    std::string domain;
    std::string url_text;
    client::Url url;
    std::string url_error;
    client::TlsClientOptions tls;
    std::string token;
    // Kept-alive connections (shared with calls given up at their deadline, which may outlive
    // the client); null with pool_error saying why (said at each call).
    std::shared_ptr<client::HttpConnectionPool> pool;
    std::string pool_error;
  };
  static constexpr int kMaxStuckCalls = 16;
  std::vector<Peer> peers_;
  std::string user_agent_;
  int timeout_ms_ = 2000;
  // Calls given up at their deadline whose thread still waits for the peer (shared with those
  // threads, which may outlive the client).
  std::shared_ptr<std::atomic<int>> stuck_ = std::make_shared<std::atomic<int>>(0);
};

// The phase of a call, for faults: "view", "reserve" (segment creation), "lookup" (by
// client_request_id), "get", "modify", or the action ("commit", "abort", "provision",
// "release", "terminate", "rotate-key").
std::string phase_of(const std::string& method, const std::string& path);

enum class FaultKind : uint8_t {
  kRefuse,   // answered 409 "injected_refusal" without reaching the peer
  kTimeout,  // the peer does it, the answer comes after the deadline (lost)
  kDrop,     // the connection drops before the peer sees the call
};

struct Fault {
  std::string domain;
  std::string phase;
  FaultKind kind = FaultKind::kRefuse;
  int times = -1;  // how many calls it hits (-1: every one)
};

class FaultInjector {
 public:
  void add(Fault fault);
  void clear();
  // The fault for this call, if any (counts it).
  std::optional<FaultKind> match(const std::string& domain, const std::string& phase);

 private:
  std::mutex mutex_;
  std::vector<Fault> faults_;
};

}  // namespace detwan::control::federation
