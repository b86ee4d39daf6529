#pragma once
// A minimal blocking HTTP/1.1 client of detwan-agent's API (Boost.Beast): one request per
// connection, a deadline for the whole exchange. https:// URLs speak TLS 1.2+ (OpenSSL 3): the
// agent's certificate is verified against TlsClientOptions::ca_file (or the system's store)
// and must name the URL's host (IP or DNS subjectAltName); with cert_file/key_file we present
// our own (mutual TLS). Errors name the URL and, for TLS, OpenSSL's reason ("certificate
// verify failed: ..."). Threading: none shared; each call is independent. Used by detwanctl,
// the Slurm plugin (through detwanctl), agents calling peers, and the collective library
// (reservation_client.h).
#include <string>

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

}  // namespace detwan::control::client
