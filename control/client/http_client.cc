#include "control/client/http_client.h"

#include <chrono>

// GCC 12 with -fsanitize=address,undefined reports a false -Wmaybe-uninitialized inside
// Beast's parser (boost::optional in basic_parser::content_length), fatal under -Werror.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#pragma GCC diagnostic pop
#include <fmt/format.h>

namespace detwan::control::client {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

common::Result<Url> parse_url(const std::string& text) {
  std::string rest = text;
  if (rest.rfind("https://", 0) == 0) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("'{}': https is not spoken here; use http:// (behind a "
                                          "TLS proxy if the agent is remote)",
                                          text));
  }
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  Url url;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    url.base_path = rest.substr(slash);
    while (!url.base_path.empty() && url.base_path.back() == '/') url.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) {
      return common::make_error(common::ErrorCode::kInvalidArgument,
                                fmt::format("'{}': unbalanced '['", text));
    }
    url.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') url.port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    url.host = rest.substr(0, colon);
    if (colon != std::string::npos) url.port = rest.substr(colon + 1);
  }
  if (url.host.empty() || url.port.empty()) {
    return common::make_error(
        common::ErrorCode::kInvalidArgument,
        fmt::format("'{}' is not an agent URL like http://127.0.0.1:7800", text));
  }
  return url;
}

common::Result<HttpAnswer> http_call(const Url& url, const std::string& method,
                                     const std::string& path, const std::string& body,
                                     const std::string& token, int timeout_ms,
                                     const std::string& user_agent,
                                     const TlsClientOptions* tls) {
  (void)tls;
  const std::string where =
      fmt::format("http://{}:{}{}{}", url.host, url.port, url.base_path, path);
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(std::chrono::milliseconds(timeout_ms));
    beast::error_code ec;
    const auto endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("{}: cannot resolve: {}", where, ec.message()));
    }
    stream.connect(endpoints, ec);
    if (ec) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                fmt::format("no agent at {}: {}", where, ec.message()));
    }
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
    request.keep_alive(false);
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
    if (ec == beast::error::timeout) {
      return common::make_error(common::ErrorCode::kTimeout,
                                fmt::format("{}: no answer within {} ms", where, timeout_ms));
    }
    if (ec) {
      return common::make_error(common::ErrorCode::kIo,
                                fmt::format("{}: reading: {}", where, ec.message()));
    }
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    return HttpAnswer{static_cast<int>(parser.get().result_int()), parser.get().body()};
  } catch (const std::exception& e) {
    return common::make_error(common::ErrorCode::kIo, fmt::format("{}: {}", where, e.what()));
  }
}

}  // namespace detwan::control::client
