#include "control/api/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <sstream>
#include <thread>

// GCC 12 with -fsanitize=address,undefined reports a false -Wmaybe-uninitialized inside
// Beast's parser (boost::optional in basic_parser::content_length), fatal under -Werror.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>
#pragma GCC diagnostic pop
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/crypto.h"
#include "common/logging.h"
#include "common/prometheus.h"
#include "common/secret_file.h"
#include "control/api/http_internal.h"

namespace detwan::control::api {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr uint32_t kHeaderLimitBytes = 16 * 1024;

common::IpAddress address_of(const asio::ip::address& a) {
  common::IpAddress out;
  if (a.is_v4()) {
    const auto bytes = a.to_v4().to_bytes();
    std::copy(bytes.begin(), bytes.end(), out.bytes);
  } else if (a.to_v6().is_v4_mapped()) {
    const auto bytes = a.to_v6().to_v4().to_bytes();
    std::copy(bytes.begin(), bytes.end(), out.bytes);
  } else {
    out.ipv6 = true;
    const auto bytes = a.to_v6().to_bytes();
    std::copy(bytes.begin(), bytes.end(), out.bytes);
  }
  return out;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  return common::crypto::equal_ct(std::as_bytes(std::span(a.data(), a.size())),
                                  std::as_bytes(std::span(b.data(), b.size())));
}

std::string error_body(std::string_view code, std::string_view message) {
  return boost::json::serialize(
      boost::json::object{{"error", boost::json::object{{"code", code}, {"message", message}}}});
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  // Replaced whole by reload_tokens() (SIGHUP); a request reads one snapshot.
  std::atomic<std::shared_ptr<const std::vector<Token>>> tokens{
      std::make_shared<const std::vector<Token>>()};
  std::vector<std::thread> threads;
  std::atomic<uint32_t> connections{0};
  mutable std::mutex counters_mutex;
  HttpCounters counters;
  std::atomic<bool> stopped{false};
  // Requests handed to the handler and not yet answered: a Respond may be called from any
  // thread at any time, even after stop(). stop() takes their sessions away while the
  // io_context still exists (a session must never outlive it); a late answer is then dropped.
  struct PendingAnswer {
    std::mutex mutex;
    std::shared_ptr<void> session;  // the Session; null once answered or stopped
  };
  std::mutex pending_mutex;
  std::vector<std::weak_ptr<PendingAnswer>> pending;
  void track(const std::shared_ptr<PendingAnswer>& p) {
    std::lock_guard lock(pending_mutex);
    std::erase_if(pending, [](const std::weak_ptr<PendingAnswer>& w) { return w.expired(); });
    pending.push_back(p);
  }
  // The address it listens on, port resolved: read once before the threads start (the acceptor
  // belongs to them afterwards; reading it from another thread races with the accept).
  common::HostPort bound;
  // TLS (null: plain HTTP). Before io: sessions hold SSL objects made from it.
  std::unique_ptr<asio::ssl::context> ssl;
  // Last, so they are destroyed first: ~io_context destroys the sessions still pending, and a
  // session's destructor counts itself out of `connections` above.
  asio::io_context io;
  tcp::acceptor acceptor{io};

  void count(uint64_t HttpCounters::*field) {
    std::lock_guard lock(counters_mutex);
    ++(counters.*field);
  }
  bool allowed(const asio::ip::address& a) const {
    const common::IpAddress address = address_of(a);
    for (const common::IpPrefix& p : options.allow) {
      if (common::prefix_contains(p, address)) return true;
    }
    return false;
  }
  void accept();
};

namespace {

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// One connection; Stream is beast::tcp_stream (plain HTTP) or TlsStream.
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

 public:
  Session(tcp::socket socket, HttpServer::Impl& server)
      : stream_(make_stream(std::move(socket), server)),
        server_(server),
        strand_(stream_.get_executor()) {
    beast::error_code ignored;
    const auto remote = lowest().socket().remote_endpoint(ignored);
    if (!ignored) client_ = fmt::format("{}:{}", remote.address().to_string(), remote.port());
  }
  ~Session() { --server_.connections; }

  void start() {
    if constexpr (kTls) {
      // The handshake has the request deadline too: a client that opens TCP and says nothing
      // is closed at request_timeout.
      lowest().expires_after(std::chrono::nanoseconds(server_.options.request_timeout_ns));
      stream_.async_handshake(
          asio::ssl::stream_base::server,
          beast::bind_front_handler(&Session::on_handshake, this->shared_from_this()));
    } else {
      read();
    }
  }

 private:
  static Stream make_stream(tcp::socket socket, HttpServer::Impl& server) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *server.ssl);
    } else {
      return Stream(std::move(socket));
    }
  }
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  void on_handshake(beast::error_code ec) {
    if constexpr (kTls) {
      SSL* ssl = stream_.native_handle();
      if (ec) {
        std::string reason = ec.message();
        bool certificate = false;
        if (ec.category() == asio::error::get_ssl_category()) {
          const int why = ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
          if (why == SSL_R_HTTP_REQUEST || why == SSL_R_HTTPS_PROXY_REQUEST) {
            reason = "plain HTTP on the TLS port";
          } else if (why == SSL_R_CERTIFICATE_VERIFY_FAILED) {
            certificate = true;
            reason = fmt::format("certificate verify failed: {}",
                                 X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
          } else if (why == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
            certificate = true;
            reason = "no client certificate (this agent requires one)";
          }
        } else if (ec == beast::error::timeout) {
          reason = "no TLS handshake within the request timeout";
        }
        server_.count(certificate ? &HttpCounters::refused_cert : &HttpCounters::refused_tls);
        common::logger("detwan-agent")->warn("TLS handshake from {} refused: {}", client_, reason);
        return close();
      }
      if (!server_.options.tls.client_ca_file.empty()) {
        const X509* peer = SSL_get0_peer_certificate(ssl);
        if (peer != nullptr && SSL_get_verify_result(ssl) == X509_V_OK) {
          peer_domain_ = certificate_domain(peer);
          char subject[256] = {0};
          X509_NAME_oneline(X509_get_subject_name(peer), subject, sizeof subject);
          peer_name_ = subject;
          // The root of the verified chain: which of client_ca's CAs vouched for it.
          if (STACK_OF(X509)* chain = SSL_get0_verified_chain(ssl);
              chain != nullptr && sk_X509_num(chain) > 0) {
            peer_issuer_ = certificate_sha256(sk_X509_value(chain, sk_X509_num(chain) - 1));
          }
          if (peer_domain_.empty()) {
            server_.count(&HttpCounters::refused_cert);
            common::logger("detwan-agent")
                ->warn(
                    "TLS client {} ({}): its certificate names no domain (SAN URI "
                    "detwan://domain/NAME or CN); closed",
                    client_, peer_name_);
            return close();
          }
        }
      }
    }
    read();
  }

  void read() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimitBytes);
    parser_->body_limit(server_.options.max_body_bytes);
    lowest().expires_after(std::chrono::nanoseconds(server_.options.request_timeout_ns));
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, this->shared_from_this()));
  }

  // The request's identity: its token's, else the peer certificate's, else anonymous (no
  // tokens file). Returns false (and answers) if refused.
  bool authenticate(const http::request<http::string_body>& request) {
    identity_ = Identity{};
    const std::string_view target = request.target();
    const std::string_view path = target.substr(0, target.find('?'));
    const bool health =
        request.method() == http::verb::get &&
        std::find(server_.options.open_paths.begin(), server_.options.open_paths.end(), path) !=
            server_.options.open_paths.end();
    const auto auth = request[http::field::authorization];
    const std::shared_ptr<const std::vector<Token>> tokens_held = server_.tokens.load();
    const std::vector<Token>& tokens = *tokens_held;
    const Token* match = nullptr;
    if (!auth.empty() && !tokens.empty()) {
      const std::string prefix = "bearer ";  // the scheme name is case-insensitive (RFC 7235)
      std::string scheme(auth.substr(0, std::min(auth.size(), prefix.size())));
      for (char& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (auth.size() > prefix.size() && scheme == prefix) {
        const std::string given(auth.substr(prefix.size()));
        for (const Token& t : tokens) {
          if (constant_time_equal(t.token, given)) match = &t;
        }
      }
    }
    if (match != nullptr) {
      identity_.kind = Identity::Kind::kToken;
      identity_.name = match->name;
      identity_.tenant = match->tenant;
      identity_.may_read = match->may_read;
      identity_.may_reserve = match->may_reserve;
      identity_.may_admin = match->may_admin;
      identity_.sites = match->sites;
      if (!identity_.may_reserve && request.method() != http::verb::get) {
        server_.count(&HttpCounters::refused_token);
        common::logger("detwan-agent")
            ->warn("403 forbidden: token '{}' (tenant '{}') from {} may only read: {} {}",
                   identity_.name, identity_.tenant, client_, std::string(request.method_string()),
                   std::string(request.target()));
        send_error(403, "forbidden", "this token may only read (GET)", keep_alive_);
        return false;
      }
      return true;
    }
    // A token that is not ours is refused even beside a certificate (never a way to be a peer).
    const bool wrong_token = !tokens.empty() && !auth.empty();
    if (!peer_domain_.empty() && !wrong_token) {
      // Whatever else it sends, a client with a verified certificate is that peer (never
      // anonymous, even on an agent without tokens).
      identity_.kind = Identity::Kind::kPeer;
      identity_.name = peer_name_;
      identity_.domain = peer_domain_;
      identity_.issuer_sha256 = peer_issuer_;
      identity_.may_admin = false;
      return true;
    }
    if (!tokens.empty() && !health) {
      server_.count(&HttpCounters::refused_token);
      send_error(401, "unauthorized",
                 "this agent needs 'Authorization: Bearer TOKEN' (see its tokens_file)",
                 keep_alive_);
      return false;
    }
    return true;  // anonymous: no tokens file (or GET /healthz)
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::ssl::error::stream_truncated) {
      return close();
    }
    if (ec == http::error::body_limit) {
      server_.count(&HttpCounters::bad_requests);
      return send_error(413, "body_too_large",
                        fmt::format("request body above {} bytes", server_.options.max_body_bytes),
                        false);
    }
    if (ec == http::error::header_limit) {
      server_.count(&HttpCounters::bad_requests);
      return send_error(431, "headers_too_large", "request headers above 16 KiB", false);
    }
    if (ec) {
      if (ec != beast::error::timeout) server_.count(&HttpCounters::bad_requests);
      return close();
    }
    http::request<http::string_body> request = parser_->release();
    keep_alive_ = request.keep_alive();
    // Authentication before any work is done for the request.
    if (!authenticate(request)) return;
    HttpRequest out;
    out.identity = identity_;
    if (const auto auth = request[http::field::authorization];
        auth.size() > 7 && (auth.substr(0, 7) == "Bearer " || auth.substr(0, 7) == "bearer ")) {
      out.bearer_token = std::string(auth.substr(7));
    }
    out.method = std::string(request.method_string());
    out.target = std::string(request.target());
    const size_t q = out.target.find('?');
    out.path = out.target.substr(0, q);
    out.query = q == std::string::npos ? "" : out.target.substr(q + 1);
    out.body = std::move(request.body());
    out.content_type = std::string(request[http::field::content_type]);
    out.client = client_;
    lowest().expires_never();  // the handler may wait (provisioning); the client waits with us
    auto pending = std::make_shared<HttpServer::Impl::PendingAnswer>();
    pending->session = this->shared_from_this();
    server_.track(pending);
    server_.handler(std::move(out), [pending](HttpResponse response) {
      // Exactly once, and never after the server stopped. The post happens under the mutex so
      // stop() cannot destroy the io_context between taking the session and posting to it.
      std::lock_guard lock(pending->mutex);
      auto self = std::static_pointer_cast<Session>(std::move(pending->session));
      pending->session.reset();
      if (!self) return;
      asio::post(self->strand_, [self, response = std::move(response)]() mutable {
        self->send(std::move(response), self->keep_alive_);
      });
    });
  }

  void send_error(int status, std::string_view code, const std::string& message, bool keep_alive) {
    HttpResponse response;
    response.status = status;
    response.body = error_body(code, message);
    send(std::move(response), keep_alive);
  }

  void send(HttpResponse response, bool keep_alive) {
    auto message = std::make_shared<http::response<http::string_body>>();
    message->result(static_cast<unsigned>(response.status));
    message->version(11);
    message->set(http::field::server, server_.options.server_name);
    message->set(http::field::content_type, response.content_type);
    message->set("X-Content-Type-Options", "nosniff");
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive);
    message->prepare_payload();
    lowest().expires_after(std::chrono::nanoseconds(server_.options.request_timeout_ns));
    http::async_write(
        stream_, *message,
        [self = this->shared_from_this(), message, keep_alive](beast::error_code ec, std::size_t) {
          if (ec || !keep_alive) return self->close();
          self->read();
        });
  }

  void close() {
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  Stream stream_;
  HttpServer::Impl& server_;
  asio::strand<asio::any_io_executor> strand_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  std::string client_;       // "ip:port"
  std::string peer_domain_;  // verified client certificate's domain ("" = none)
  std::string peer_name_;    // its subject
  std::string peer_issuer_;  // SHA-256 of the CA its chain was verified up to
  Identity identity_;        // of the request being handled
};

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (!stopped) accept();
      return;
    }
    beast::error_code remote_error;
    const auto remote = socket.remote_endpoint(remote_error);
    if (remote_error || !allowed(remote.address())) {
      count(&HttpCounters::refused_address);
      beast::error_code ignored;
      socket.close(ignored);
    } else if (connections.load() >= options.max_connections) {
      count(&HttpCounters::refused_connections);
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      ++connections;
      count(&HttpCounters::accepted);
      if (ssl) {
        std::make_shared<Session<TlsStream>>(std::move(socket), *this)->start();
      } else {
        std::make_shared<Session<beast::tcp_stream>>(std::move(socket), *this)->start();
      }
    }
    accept();
  });
}

std::string http_counters_text(const HttpCounters& c, std::string_view prefix) {
  common::prometheus::Exposition e;
  const std::string name = fmt::format("{}_connections_total", prefix);
  const std::pair<const char*, uint64_t> rows[] = {{"accepted", c.accepted},
                                                   {"refused_address", c.refused_address},
                                                   {"refused_connections", c.refused_connections},
                                                   {"refused_token", c.refused_token},
                                                   {"bad_request", c.bad_requests},
                                                   {"refused_tls", c.refused_tls},
                                                   {"refused_cert", c.refused_cert}};
  for (const auto& [outcome, n] : rows) {
    e.counter(name,
              "HTTP connections and requests by outcome (refused_tls: plain HTTP or a failed TLS "
              "handshake; refused_cert: a client certificate refused).",
              {{"outcome", outcome}}, n);
  }
  return e.text();
}

common::Result<size_t> HttpServer::reload_tokens() {
  const std::string& file = impl_->options.tokens_file;
  if (file.empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              "no tokens file (agent.api.tokens_file): nothing to reload");
  }
  auto tokens = load_tokens(file);
  if (!tokens) return std::unexpected(tokens.error());
  if (tokens->empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              file + ": no token left (the agent would serve anyone); kept the "
                                     "tokens in force");
  }
  const size_t count = tokens->size();
  impl_->tokens.store(std::make_shared<const std::vector<Token>>(std::move(*tokens)));
  return count;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

common::Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options,
                                                              Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  if (!options.tokens_file.empty()) {
    auto tokens = load_tokens(options.tokens_file);
    if (!tokens) return std::unexpected(tokens.error());
    impl->tokens.store(std::make_shared<const std::vector<Token>>(std::move(*tokens)));
  }
  if (!options.tls.cert_file.empty()) {
    auto ctx = detail::make_server_context(options.tls);
    if (!ctx) return std::unexpected(ctx.error());
    impl->ssl = std::move(*ctx);
  } else if (!options.tls.client_ca_file.empty() || options.tls.require_client_cert) {
    return common::make_error(common::ErrorCode::kConfig,
                              "TLS: client_ca / require_client_cert need a certificate (tls.cert)");
  }
  const std::string text = common::format_host_port(options.listen);
  beast::error_code ec;
  const auto address =
      asio::ip::make_address(common::format_ip_address(options.listen.address), ec);
  if (ec)
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("listen {}: {}", text, ec.message()));
  const tcp::endpoint endpoint(address, options.listen.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("cannot listen on {}: {}", text, ec.message()));
  }
  impl->bound = options.listen;
  if (const auto local = impl->acceptor.local_endpoint(ec); !ec) impl->bound.port = local.port();
  impl->accept();
  for (uint32_t i = 0; i < std::max(1u, options.threads); ++i) {
    impl->threads.emplace_back([raw = impl.get()] { raw->io.run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::stop() {
  if (impl_->stopped.exchange(true)) return;
  // The acceptor is closed once no I/O thread runs: its accept handler runs on any of them (it
  // re-arms the accept right after starting a session), so a close posted to the io_context
  // could run beside it on another thread (ThreadSanitizer in CI saw that race).
  impl_->io.stop();
  for (std::thread& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
  // Requests still with the handler: their sessions go now, while the io_context exists.
  std::vector<std::shared_ptr<Impl::PendingAnswer>> pending;
  {
    std::lock_guard lock(impl_->pending_mutex);
    for (const auto& w : impl_->pending) {
      if (auto p = w.lock()) pending.push_back(std::move(p));
    }
    impl_->pending.clear();
  }
  for (const auto& p : pending) {
    std::shared_ptr<void> session;
    {
      std::lock_guard lock(p->mutex);
      session = std::move(p->session);
      p->session.reset();
    }
  }
}

common::HostPort HttpServer::local_endpoint() const { return impl_->bound; }

HttpCounters HttpServer::counters() const {
  std::lock_guard lock(impl_->counters_mutex);
  return impl_->counters;
}

}  // namespace detwan::control::api
