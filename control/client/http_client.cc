#include "control/client/http_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

// GCC 12 with -fsanitize=address,undefined reports a false -Wmaybe-uninitialized inside
// Beast's parser (boost::optional in basic_parser::content_length), fatal under -Werror.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#pragma GCC diagnostic pop
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/net_address.h"
#include "common/secret_file.h"

namespace detwan::control::client {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

common::Result<Url> parse_url(const std::string& text) {
  std::string rest = text;
  Url url;
  if (rest.rfind("https://", 0) == 0) {
    rest = rest.substr(8);
    url.https = true;
  } else if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    url.base_path = rest.substr(slash);
    while (!url.base_path.empty() && url.base_path.back() == '/') url.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  common::EndpointRules rules;
  rules.default_port = url.https ? 443 : 80;
  auto endpoint = common::parse_endpoint(rest, rules);
  if (!endpoint) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("'{}' is not an agent URL like http://127.0.0.1:7800: {}",
                                          text, endpoint.error().message));
  }
  url.host = std::move(endpoint->host);
  url.port = std::to_string(endpoint->port);
  return url;
}

namespace {

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// The client's TLS context: TLS 1.2+, the server verified against `ca_file` (or the default
// store), our certificate and key when given. Errors name the file.
common::Result<std::unique_ptr<asio::ssl::context>> client_context(const TlsClientOptions& tls,
                                                                   const std::string& where) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_verify_mode(asio::ssl::verify_peer);
  beast::error_code ec;
  if (tls.ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
  } else {
    ctx->load_verify_file(tls.ca_file, ec);
  }
  if (ec) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("{}: CA file '{}': {}", where,
                    tls.ca_file.empty() ? "<default store>" : tls.ca_file, ec.message()));
  }
  if (!tls.cert_file.empty()) {
    ctx->use_certificate_chain_file(tls.cert_file, ec);
    if (ec) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("{}: certificate '{}': {}", where, tls.cert_file, ec.message()));
    }
    if (tls.key_file.empty()) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("{}: certificate '{}' given without its key file", where, tls.cert_file));
    }
    auto key = common::read_secret_file(tls.key_file, "TLS key file", size_t{1} << 16);
    if (!key) return std::unexpected(key.error());
    ctx->use_private_key(asio::buffer(*key), asio::ssl::context::pem, ec);
    OPENSSL_cleanse(key->data(), key->size());
    if (ec || SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("{}: key '{}' is not the key of certificate '{}'{}", where, tls.key_file,
                      tls.cert_file, ec ? ": " + ec.message() : ""));
    }
  }
  return ctx;
}

template <typename Stream>
common::Result<HttpAnswer> exchange(Stream& stream, const Url& url, const std::string& method,
                                    const std::string& path, const std::string& body,
                                    const std::string& token, int timeout_ms,
                                    const std::string& user_agent, const std::string& where,
                                    bool keep_alive = false, bool* reusable = nullptr,
                                    bool* answered = nullptr) {
  beast::error_code ec;
  http::request<http::string_body> request;
  request.method(http::string_to_verb(method));
  request.target(url.base_path + path);
  request.version(11);
  request.set(http::field::host, url.host);
  request.set(http::field::user_agent, user_agent);
  if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
  if (!body.empty()) {
    request.set(http::field::content_type, "application/json");
    request.body() = body;
  }
  request.keep_alive(keep_alive);
  request.prepare_payload();
  http::write(stream, request, ec);
  if (ec) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("{}: sending: {}", where, ec.message()));
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256u << 20);
  http::read(stream, buffer, parser, ec);
  if (answered != nullptr) *answered = parser.got_some();
  if (ec == beast::error::timeout) {
    return common::make_error(common::ErrorCode::kTimeout,
                              fmt::format("{}: no answer within {} ms", where, timeout_ms));
  }
  if (ec) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("{}: reading: {}", where, ec.message()));
  }
  if (keep_alive && parser.get().keep_alive()) {
    if (reusable != nullptr) *reusable = true;
  } else {
    beast::error_code ignored;
    beast::get_lowest_layer(stream).socket().shutdown(asio::ip::tcp::socket::shutdown_both,
                                                      ignored);
  }
  return HttpAnswer{static_cast<int>(parser.get().result_int()), parser.get().body()};
}

// The agent's certificate must name the host we asked for: its IP address or DNS name.
void expect_host(TlsStream& stream, const Url& url) {
  SSL* ssl = stream.native_handle();
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  beast::error_code ec;
  asio::ip::make_address(url.host, ec);
  if (!ec) {
    X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0);
    SSL_set_tlsext_host_name(ssl, url.host.c_str());
  }
}

// The client's side of the handshake; the error names the certificate problem if there is one.
common::Result<void> handshake(TlsStream& stream, int timeout_ms, const std::string& where) {
  beast::error_code ec;
  stream.handshake(asio::ssl::stream_base::client, ec);
  if (!ec) return {};
  std::string reason = ec.message();
  const long verify = SSL_get_verify_result(stream.native_handle());
  if (verify != X509_V_OK) {
    reason = fmt::format("certificate verify failed: {}", X509_verify_cert_error_string(verify));
  } else if (ec == beast::error::timeout) {
    reason = fmt::format("no TLS handshake within {} ms", timeout_ms);
  }
  return common::make_error(common::ErrorCode::kUnavailable,
                            fmt::format("{}: TLS handshake failed: {}", where, reason));
}

std::string where_of(const Url& url, const std::string& path) {
  return fmt::format("{}://{}:{}{}{}", url.https ? "https" : "http", url.host, url.port,
                     url.base_path, path);
}

}  // namespace

common::Result<HttpAnswer> http_call(const Url& url, const std::string& method,
                                     const std::string& path, const std::string& body,
                                     const std::string& token, int timeout_ms,
                                     const std::string& user_agent, const TlsClientOptions* tls) {
  const std::string where = where_of(url, path);
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("{}: cannot resolve: {}", where, ec.message()));
    }
    if (!url.https) {
      if (tls != nullptr && (!tls->cert_file.empty() || !tls->ca_file.empty())) {
        // Never send a token in clear text to an agent the caller meant to reach over TLS.
        return common::make_error(
            common::ErrorCode::kInvalidArgument,
            fmt::format("{}: TLS options (CA/certificate) given for an http:// URL; use https://",
                        where));
      }
      beast::tcp_stream stream(io);
      stream.expires_after(std::chrono::milliseconds(timeout_ms));
      stream.connect(endpoints, ec);
      if (ec) {
        return common::make_error(common::ErrorCode::kUnavailable,
                                  fmt::format("no agent at {}: {}", where, ec.message()));
      }
      return exchange(stream, url, method, path, body, token, timeout_ms, user_agent, where);
    }
    const TlsClientOptions defaults;
    auto ctx = client_context(tls != nullptr ? *tls : defaults, where);
    if (!ctx) return std::unexpected(ctx.error());
    TlsStream stream(io, **ctx);
    expect_host(stream, url);
    auto& tcp = beast::get_lowest_layer(stream);
    tcp.expires_after(std::chrono::milliseconds(timeout_ms));
    tcp.connect(endpoints, ec);
    if (ec) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("no agent at {}: {}", where, ec.message()));
    }
    if (auto ok = handshake(stream, timeout_ms, where); !ok) return std::unexpected(ok.error());
    return exchange(stream, url, method, path, body, token, timeout_ms, user_agent, where);
  } catch (const std::exception& e) {
    return common::make_error(common::ErrorCode::kIo, fmt::format("{}: {}", where, e.what()));
  }
}

// ------------------------------------------------------------------ kept-alive connections

namespace {

struct Connection {
  asio::io_context io;
  std::optional<beast::tcp_stream> plain;
  std::optional<TlsStream> tls;
  std::chrono::steady_clock::time_point idle_since;
};

}  // namespace

struct HttpConnectionPool::Impl {
  Url url;
  std::string user_agent;
  size_t max_idle = 8;
  std::chrono::nanoseconds max_idle_time{0};
  std::unique_ptr<asio::ssl::context> ctx;  // https only
  std::mutex mutex;
  std::vector<std::unique_ptr<Connection>> idle;  // newest last
  std::atomic<uint64_t> opened{0};

  std::unique_ptr<Connection> take_idle() {
    std::lock_guard lock(mutex);
    const auto now = std::chrono::steady_clock::now();
    while (!idle.empty()) {
      std::unique_ptr<Connection> c = std::move(idle.back());
      idle.pop_back();
      if (now - c->idle_since < max_idle_time) return c;  // older ones: dropped here
    }
    return nullptr;
  }

  void put_idle(std::unique_ptr<Connection> c) {
    c->idle_since = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex);
    if (idle.size() < max_idle) idle.push_back(std::move(c));
  }

  common::Result<std::unique_ptr<Connection>> open(int timeout_ms, const std::string& where) {
    auto c = std::make_unique<Connection>();
    asio::ip::tcp::resolver resolver(c->io);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("{}: cannot resolve: {}", where, ec.message()));
    }
    beast::tcp_stream* tcp = nullptr;
    if (ctx) {
      c->tls.emplace(c->io, *ctx);
      expect_host(*c->tls, url);
      tcp = &beast::get_lowest_layer(*c->tls);
    } else {
      c->plain.emplace(c->io);
      tcp = &*c->plain;
    }
    tcp->expires_after(std::chrono::milliseconds(timeout_ms));
    tcp->connect(endpoints, ec);
    if (ec) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("no agent at {}: {}", where, ec.message()));
    }
    if (c->tls) {
      if (auto ok = handshake(*c->tls, timeout_ms, where); !ok) return std::unexpected(ok.error());
    }
    ++opened;
    return c;
  }
};

HttpConnectionPool::HttpConnectionPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpConnectionPool::~HttpConnectionPool() = default;

common::Result<std::shared_ptr<HttpConnectionPool>> HttpConnectionPool::create(
    const Url& url, const TlsClientOptions* tls, std::string user_agent, size_t max_idle,
    int64_t max_idle_ns) {
  auto impl = std::make_unique<Impl>();
  impl->url = url;
  impl->user_agent = std::move(user_agent);
  impl->max_idle = max_idle;
  impl->max_idle_time = std::chrono::nanoseconds(max_idle_ns);
  const std::string where = where_of(url, "");
  if (!url.https) {
    if (tls != nullptr && (!tls->cert_file.empty() || !tls->ca_file.empty())) {
      return common::make_error(
          common::ErrorCode::kInvalidArgument,
          fmt::format("{}: TLS options (CA/certificate) given for an http:// URL; use https://",
                      where));
    }
  } else {
    const TlsClientOptions defaults;
    auto ctx = client_context(tls != nullptr ? *tls : defaults, where);
    if (!ctx) return std::unexpected(ctx.error());
    impl->ctx = std::move(*ctx);
  }
  return std::shared_ptr<HttpConnectionPool>(new HttpConnectionPool(std::move(impl)));
}

common::Result<HttpAnswer> HttpConnectionPool::call(const std::string& method,
                                                    const std::string& path,
                                                    const std::string& body,
                                                    const std::string& token, int timeout_ms) {
  Impl& m = *impl_;
  const std::string where = where_of(m.url, path);
  try {
    for (int attempt = 0;; ++attempt) {
      std::unique_ptr<Connection> c = attempt == 0 ? m.take_idle() : nullptr;
      const bool reused = c != nullptr;
      if (!reused) {
        auto opened = m.open(timeout_ms, where);
        if (!opened) return std::unexpected(opened.error());
        c = std::move(*opened);
      }
      bool reusable = false;
      bool answered = false;
      common::Result<HttpAnswer> got = common::make_error(common::ErrorCode::kInternal, "");
      if (c->tls) {
        beast::get_lowest_layer(*c->tls).expires_after(std::chrono::milliseconds(timeout_ms));
        got = exchange(*c->tls, m.url, method, path, body, token, timeout_ms, m.user_agent, where,
                       true, &reusable, &answered);
      } else {
        c->plain->expires_after(std::chrono::milliseconds(timeout_ms));
        got = exchange(*c->plain, m.url, method, path, body, token, timeout_ms, m.user_agent, where,
                       true, &reusable, &answered);
      }
      // An idle connection the server closed: nothing came back; once on a fresh one (the
      // other idle ones are as old or older: dropped too).
      if (!got && reused && !answered && attempt == 0 &&
          got.error().code != common::ErrorCode::kTimeout) {
        std::lock_guard lock(m.mutex);
        m.idle.clear();
        continue;
      }
      if (got && reusable) m.put_idle(std::move(c));
      return got;
    }
  } catch (const std::exception& e) {
    return common::make_error(common::ErrorCode::kIo, fmt::format("{}: {}", where, e.what()));
  }
}

uint64_t HttpConnectionPool::connections_opened() const { return impl_->opened.load(); }

common::Result<std::vector<Url>> parse_urls(const std::string& text) {
  std::vector<Url> urls;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string one = text.substr(start, comma - start);
    auto url = parse_url(one);
    if (!url) {
      return common::make_error(common::ErrorCode::kInvalidArgument,
                                fmt::format("'{}': {}", one, url.error().message));
    }
    urls.push_back(std::move(*url));
    start = comma + 1;
  }
  return urls;
}

common::Result<HttpAnswer> http_call_replicas(const std::vector<Url>& urls,
                                              const std::string& method, const std::string& path,
                                              const std::string& body, const std::string& token,
                                              int timeout_ms, int retry_ms,
                                              const std::string& user_agent,
                                              const TlsClientOptions* tls) {
  static std::atomic<size_t> last_leader{0};
  if (urls.size() == 1) {
    return http_call(urls.front(), method, path, body, token, timeout_ms, user_agent, tls);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_ms);
  common::Result<HttpAnswer> last =
      common::make_error(common::ErrorCode::kInvalidArgument, "no agent URL");
  while (true) {
    const size_t first = last_leader.load();
    for (size_t k = 0; k < urls.size(); ++k) {
      const size_t index = (first + k) % urls.size();
      last = http_call(urls[index], method, path, body, token, timeout_ms, user_agent, tls);
      if (last && last->status != 503) {
        last_leader.store(index);
        return last;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace detwan::control::client
