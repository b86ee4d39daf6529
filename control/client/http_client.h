#pragma once
// A minimal blocking HTTP/1.1 client of detwan-agent's API (Boost.Beast): one request per
// connection, a deadline for the whole exchange. Errors name the URL. Used by detwanctl and by
// the collective library (reservation_client.h).
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

// "http://127.0.0.1:7800", "127.0.0.1:7800", "http://[::1]:7800/agent". https is not supported
// (put a TLS proxy in front; said in the error).
common::Result<Url> parse_url(const std::string& text);

struct HttpAnswer {
  int status = 0;
  std::string body;
};

common::Result<HttpAnswer> http_call(const Url& url, const std::string& method,
                                     const std::string& path, const std::string& body,
                                     const std::string& token, int timeout_ms,
                                     const std::string& user_agent = "detwanctl",
                                     const TlsClientOptions* tls = nullptr);

}  // namespace detwan::control::client
