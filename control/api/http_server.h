#pragma once
// The agent's HTTP/1.1 server (Boost.Beast), docs/control-api.md "Access".
//
// Who may talk to it, checked before anything is read or allocated for a connection:
//   * the client's address must lie in one of `allow` (default: loopback only);
//   * at most `max_connections` connections at once (more are closed at accept);
//   * with a tokens file, every request but a GET of one of `open_paths` (/healthz, the
//     console's static page) carries "Authorization: Bearer T"
//     (or comes over mutual TLS with a verified client certificate: a peer agent); read-only
//     tokens may GET, others may also POST/PATCH/DELETE; the routes check the rest with the
//     request's Identity (control/api/authority.h);
//   * with tls.cert_file, HTTPS only (TLS 1.2+, 1.3 preferred): a client speaking plain HTTP or
//     failing the handshake (unknown CA, no certificate when one is required) is closed,
//     counted (refused_tls / refused_cert) and logged with its address. The handshake has the
//     request_timeout deadline too.
// Bounded work per connection: headers <= 16 KiB, bodies <= max_body_bytes (413 beyond),
// one request at a time, `request_timeout_ns` to send a request (the connection is closed
// after it), keep-alive between requests.
//
// The handler is called on an I/O thread and answers through `respond`, now or later from any
// thread (exactly once). Threading: start() then the server runs on its own threads until
// stop() or destruction.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/net_address.h"
#include "common/status.h"

namespace detwan::control::api {

// Who sent a request, established by the server before the handler runs (docs/control-api.md,
// "Access"). Routes decide with it what the request may see and change.
struct Identity {
  enum class Kind : uint8_t {
    kAnonymous,  // the agent has no tokens (single-domain lab on loopback)
    kToken,      // a bearer token from the tokens file
    kPeer,       // another domain's agent, by its client certificate (mutual TLS)
  };
  Kind kind = Kind::kAnonymous;
  std::string name;    // the token's label, or the peer certificate's subject
  std::string tenant;  // kToken: the tenant it acts for ("" = every tenant: an admin token)
  std::string domain;  // kPeer: the domain its certificate names
  // kPeer: SHA-256 (lowercase hex) of the CA certificate its chain was verified up to. Any CA in
  // agent.tls.client_ca may have issued it; federation routes also require that it is the CA
  // listed for `domain` (federation.peers[].ca), so one owner cannot speak as another.
  std::string issuer_sha256;
  bool may_read = true;
  bool may_reserve = true;
  bool may_admin = true;
  std::vector<std::string> sites;  // kToken: the sites it may reserve between (empty: any)
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::string path;    // without the query
  std::string query;
  std::string body;
  std::string content_type;
  std::string client;  // "ip:port"
  Identity identity;
  // The request's "Authorization: Bearer" token ("" if none): federation routes map a peer's
  // token to its domain (docs/federation.md). Never logged.
  std::string bearer_token;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

using Respond = std::function<void(HttpResponse)>;
using Handler = std::function<void(HttpRequest, Respond)>;

// TLS on the listening socket (OpenSSL 3 through Boost.Asio). Without cert_file the server
// speaks plain HTTP. With client_ca_file, clients may present a certificate; a peer agent must
// (its certificate names its domain), and require_client_cert refuses every client without one.
struct TlsServerOptions {
  std::string cert_file;       // PEM chain
  std::string key_file;        // PEM private key (a secret file: private, ours or root's)
  std::string client_ca_file;  // CAs whose client certificates are accepted ("" = none)
  bool require_client_cert = false;
};

struct HttpServerOptions {
  common::HostPort listen;
  std::vector<common::IpPrefix> allow;
  std::string tokens_file;  // "" = no tokens
  // Paths a GET may ask without a token (no data behind them: liveness, a static page).
  std::vector<std::string> open_paths = {"/healthz"};
  uint32_t max_connections = 64;
  uint64_t max_body_bytes = 1 << 20;
  int64_t request_timeout_ns = 10'000'000'000;
  uint32_t threads = 2;
  TlsServerOptions tls;
  std::string server_name = "detwan-agent";  // the Server header of every answer
};

struct HttpCounters {
  uint64_t accepted = 0;
  uint64_t refused_address = 0;      // client not in `allow`
  uint64_t refused_connections = 0;  // above max_connections
  uint64_t refused_token = 0;        // 401/403
  uint64_t bad_requests = 0;         // unparseable HTTP, too large, timeouts
  uint64_t refused_tls = 0;          // TLS port: plain HTTP, failed or timed-out handshake
  uint64_t refused_cert = 0;         // client certificate unknown/invalid, or missing when required
};

// The counters in Prometheus text format, appended to an exporter's /metrics:
// PREFIX_connections_total{outcome="accepted|refused_address|refused_connections|
// refused_token|bad_request|refused_tls|refused_cert"} (the agent: detwan_agent_http, a
// gateway: detwan_gw_http).
std::string http_counters_text(const HttpCounters& counters,
                               std::string_view prefix = "detwan_agent_http");

class HttpServer {
 public:
  // Binds and listens (errors name the address); loads the tokens file (errors name its line)
  // and the TLS files (errors name the file and OpenSSL's reason).
  static common::Result<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options,
                                                           Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void stop();
  [[nodiscard]] common::HostPort local_endpoint() const;  // the bound port when 0 was asked
  [[nodiscard]] HttpCounters counters() const;
  // Reads the tokens file again (SIGHUP, detwan-agent run) and puts its tokens in force for
  // every request from now on; requests being answered keep the tokens they were checked with.
  // Refused, keeping the tokens in force, when there is no tokens file, when it does not parse
  // (the error names the line) or when it holds no token. Returns the number of tokens.
  common::Result<size_t> reload_tokens();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The TLS files as start() loads them (certificate, key matching it, a secret key file, client
// CAs), without listening: `detwan-agent check`. Errors name the file and OpenSSL's reason.
common::Result<void> check_tls_options(const TlsServerOptions& tls);

// Tokens file (docs/trust.md), one token per line, '#' comments; errors name the line:
//   read TOKEN | write TOKEN      (old form: read = may_read; write = read+reserve+admin, tenant
//   "") token=T tenant=NAME|* verbs=read,reserve,admin [sites=a,b] [name=LABEL]   (any order)
// reserve and admin imply read; admin implies reserve; tenant=* needs admin (an operator token
// over the whole domain: Identity::tenant ""). Tokens are at least 16 characters.
struct Token {
  std::string token;
  bool write = false;  // may change anything (reserve or admin)
  std::string name;    // label for logs ("line N" when not given)
  std::string tenant;  // "" = every tenant (write / tenant=*)
  bool may_read = true;
  bool may_reserve = false;
  bool may_admin = false;
  std::vector<std::string> sites;  // empty: any
};
common::Result<std::vector<Token>> load_tokens(const std::string& path);

// The domain a verified peer certificate names: its subjectAltName URI "detwan://domain/NAME",
// else its subject CN; "" if neither. `x509` is an OpenSSL X509* (void* keeps OpenSSL out of
// this header).
std::string certificate_domain(const void* x509);
// SHA-256 (lowercase hex) of a certificate's DER encoding (an X509*): how a peer's CA is pinned.
std::string certificate_sha256(const void* x509);

}  // namespace detwan::control::api
