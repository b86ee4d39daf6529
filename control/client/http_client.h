#pragma once
// A minimal blocking HTTP/1.1 client of detwan-agent's API (Boost.Beast): one request per
// connection, a deadline for the whole exchange. https:// URLs speak TLS 1.2+ (OpenSSL 3): the
// agent's certificate is verified against TlsClientOptions::ca_file (or the system's store)
// and must name the URL's host (IP or DNS subjectAltName); with cert_file/key_file we present
// our own (mutual TLS). Errors name the URL and, for TLS, OpenSSL's reason ("certificate
// verify failed: ..."). Threading: none shared; each call is independent. Used by detwanctl,
// the Slurm plugin (through detwanctl), agents calling peers, and the collective library
// (reservation_client.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace detwan::control::client {

struct Url {
  std::string host;
  std::string port = "80";
  std::string base_path;  // "" or "/prefix"
  bool https = false;
};

// TLS toward an https agent: the CA that signed the agent's certificate (the system's default
// store if empty) and, for mutual TLS (agent to agent), our own certificate and key.
struct TlsClientOptions {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// "http://127.0.0.1:7800", "127.0.0.1:7800", "http://[::1]:7800/agent",
// "https://agent.example:7800" (https: port 443 when not given).
common::Result<Url> parse_url(const std::string& text);

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// TLS options with an http:// URL are refused (a token is never sent in clear text to an agent
// the caller meant to reach over TLS). `tls` may be null (https: the default store, no cert).
common::Result<HttpAnswer> http_call(const Url& url, const std::string& method,
                                     const std::string& path, const std::string& body,
                                     const std::string& token, int timeout_ms,
                                     const std::string& user_agent = "detwanctl",
                                     const TlsClientOptions* tls = nullptr);

// An agent's replica set (docs/control.md, "The agent on etcd"): "URL1,URL2,..." (one URL is a
// set of one). kInvalidArgument naming the URL that does not parse.
common::Result<std::vector<Url>> parse_urls(const std::string& text);

// http_call to a replica set: the replicas are tried in turn, from the one that answered last,
// until one answers as the leader. A replica that cannot be reached, or answers 503 (a follower:
// not_leader; a leader whose store write failed: a failover under way), is passed over; the
// rounds repeat, 200 ms apart, until retry_ms has passed, then the last answer (or error) is
// returned. With one URL: one attempt, as http_call. Callers send requests that are safe to
// repeat (a reservation with its client_request_id).
common::Result<HttpAnswer> http_call_replicas(const std::vector<Url>& urls,
                                              const std::string& method,
                                              const std::string& path, const std::string& body,
                                              const std::string& token, int timeout_ms,
                                              int retry_ms, const std::string& user_agent,
                                              const TlsClientOptions* tls = nullptr);

// Kept-alive connections to one agent, for a caller that asks it often (an aggregator calling
// its peers, docs/federation.md): a call reuses an idle connection (no TCP connect, no TLS
// handshake); the TLS context (CA, certificate, key) is read once, at create(). A reused
// connection the server closed meanwhile (it closes idle ones after its request timeout; they
// are kept here for at most max_idle_ns) fails before any answer and is replaced once,
// transparently -- callers send requests that are safe to repeat. Errors as http_call's.
// Threading: call() is thread-safe; concurrent calls use separate connections; at most
// max_idle connections are kept idle.
class HttpConnectionPool {
 public:
  static common::Result<std::shared_ptr<HttpConnectionPool>> create(
      const Url& url, const TlsClientOptions* tls, std::string user_agent, size_t max_idle = 8,
      int64_t max_idle_ns = 2'000'000'000);
  ~HttpConnectionPool();
  HttpConnectionPool(const HttpConnectionPool&) = delete;
  HttpConnectionPool& operator=(const HttpConnectionPool&) = delete;

  common::Result<HttpAnswer> call(const std::string& method, const std::string& path,
                                  const std::string& body, const std::string& token,
                                  int timeout_ms);
  // Connections opened so far (a test sees reuse as fewer connections than calls).
  uint64_t connections_opened() const;

  struct Impl;

 private:
  explicit HttpConnectionPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace detwan::control::client
