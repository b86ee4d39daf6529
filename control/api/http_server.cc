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
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#pragma GCC diagnostic pop
#include <fmt/format.h>

#include "common/logging.h"
#include "common/secret_file.h"

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
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string error_body(std::string_view code, std::string_view message) {
  return boost::json::serialize(
      boost::json::object{{"error", boost::json::object{{"code", code}, {"message", message}}}});
}

}  // namespace

common::Result<std::vector<Token>> load_tokens(const std::string& path) {
  // Bearer tokens are secrets: root's or the agent's own, private to the owner, checked on the
  // opened descriptor (common/secret_file.h).
  auto text = common::read_secret_file(path, "tokens file", size_t{1} << 20);
  if (!text) return std::unexpected(text.error());
  std::istringstream in(*text);
  std::vector<Token> tokens;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string role;
    std::string token;
    std::string extra;
    if (!(words >> role)) continue;
    if (!(words >> token) || (words >> extra) || (role != "read" && role != "write") ||
        token.size() < 16) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("tokens file {}:{}: expected 'read TOKEN' or 'write TOKEN' (a token of at "
                      "least 16 characters)",
                      path, number));
    }
    tokens.push_back(Token{token, role == "write"});
  }
  if (tokens.empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("tokens file {} has no token", path));
  }
  return tokens;
}

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::vector<Token> tokens;
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

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), server_(server), strand_(stream_.get_executor()) {}
  ~Session() { --server_.connections; }

  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimitBytes);
    parser_->body_limit(server_.options.max_body_bytes);
    stream_.expires_after(std::chrono::nanoseconds(server_.options.request_timeout_ns));
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset) {
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
    identity_ = Identity{};
    // Authentication before any work is done for the request.
    if (!server_.tokens.empty()) {
      const bool health = request.method() == http::verb::get && request.target() == "/healthz";
      if (!health) {
        const auto auth = request[http::field::authorization];
        const std::string prefix = "bearer ";  // the scheme name is case-insensitive (RFC 7235)
        const Token* match = nullptr;
        std::string scheme(auth.substr(0, std::min(auth.size(), prefix.size())));
        for (char& ch : scheme)
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (auth.size() > prefix.size() && scheme == prefix) {
          const std::string given(auth.substr(prefix.size()));
          for (const Token& t : server_.tokens) {
            if (constant_time_equal(t.token, given)) match = &t;
          }
        }
        if (match == nullptr) {
          server_.count(&HttpCounters::refused_token);
          return send_error(401, "unauthorized",
                            "this agent needs 'Authorization: Bearer TOKEN' (see its tokens_file)",
                            keep_alive_);
        }
        if (!match->write && request.method() != http::verb::get) {
          server_.count(&HttpCounters::refused_token);
          return send_error(403, "forbidden", "this token may only read (GET)", keep_alive_);
        }
        identity_.kind = Identity::Kind::kToken;
        identity_.may_reserve = match->write;
        identity_.may_admin = match->write;
      }
    }
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
    beast::error_code remote_error;
    const auto remote = stream_.socket().remote_endpoint(remote_error);
    if (!remote_error)
      out.client = fmt::format("{}:{}", remote.address().to_string(), remote.port());
    stream_.expires_never();  // the handler may wait (provisioning); the client waits with us
    auto pending = std::make_shared<HttpServer::Impl::PendingAnswer>();
    pending->session = shared_from_this();
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
    message->set(http::field::server, "detwan-agent");
    message->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive);
    message->prepare_payload();
    stream_.expires_after(std::chrono::nanoseconds(server_.options.request_timeout_ns));
    http::async_write(
        stream_, *message,
        [self = shared_from_this(), message, keep_alive](beast::error_code ec, std::size_t) {
          if (ec || !keep_alive) return self->close();
          self->read();
        });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  asio::strand<asio::any_io_executor> strand_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  Identity identity_;  // of the request being handled
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
      std::make_shared<Session>(std::move(socket), *this)->start();
    }
    accept();
  });
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
    impl->tokens = std::move(*tokens);
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
