#pragma once
// Internals of the agent's HTTP server shared by its files (http_server.cc, tokens.cc,
// tls_server.cc); not an interface for other modules. Threading: none (pure functions; the
// context is built once at start).
#include <memory>
#include <string_view>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/ssl.hpp>
#pragma GCC diagnostic pop

#include "common/status.h"
#include "control/api/http_server.h"

namespace detwan::control::api::detail {

// A tenant, site, label or domain name: 1..64 of A-Z a-z 0-9 . _ - ("*" too if allow_star).
bool valid_label(std::string_view name, bool allow_star);

// The server's TLS context (TLS 1.2+, 1.3 preferred): our chain, our key (a secret file), and the
// CAs whose client certificates are accepted. Errors name the file and OpenSSL's reason.
common::Result<std::unique_ptr<boost::asio::ssl::context>> make_server_context(
    const TlsServerOptions& tls);

}  // namespace detwan::control::api::detail
