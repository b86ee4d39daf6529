#include "control/api/console_routes.h"

#include <charconv>
#include <string_view>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/strings.h"

namespace detwan::control::console {
// Generated from control/console/ by control/api/embed_text.py.
std::string_view index_html();
std::string_view console_js();
std::string_view console_css();
}  // namespace detwan::control::console

namespace detwan::control::api {
namespace json = boost::json;
using agent::ApiError;

namespace {

constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'";

HttpResponse page(int status, std::string_view body, std::string content_type) {
  HttpResponse r;
  r.status = status;
  r.body = std::string(body);
  r.content_type = std::move(content_type);
  r.headers = {{"Content-Security-Policy", kContentSecurityPolicy},
               {"X-Content-Type-Options", "nosniff"},
               {"X-Frame-Options", "DENY"},
               {"Referrer-Policy", "no-referrer"},
               {"Cache-Control", "no-cache"}};
  return r;
}

HttpResponse json_answer(int status, const json::value& body) {
  HttpResponse r;
  r.status = status;
  r.body = json::serialize(body);
  r.body += '\n';
  r.headers = {{"Cache-Control", "no-store"}};
  return r;
}

HttpResponse console_outcome(const agent::Outcome<json::object>& o) {
  return o ? json_answer(200, *o) : json_answer(o.error().status, o.error().to_json());
}

HttpResponse only_get() {
  HttpResponse r =
      json_answer(405, ApiError{405, "method_not_allowed", "allowed: GET", ""}.to_json());
  r.headers.emplace_back("Allow", "GET");
  return r;
}

// A whole number of seconds from the query (`fallback` if absent; -1 if not a number).
int64_t seconds(const std::string& query, std::string_view key, int64_t fallback) {
  const std::string text = common::query_value(query, key);
  if (text.empty()) return fallback;
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0 ||
      value > INT64_MAX / 1'000'000'000) {
    return -1;
  }
  return value;
}

json::object identity_json(const Identity& who) {
  const char* kind = who.kind == Identity::Kind::kToken  ? "token"
                     : who.kind == Identity::Kind::kPeer ? "peer"
                                                         : "anonymous";
  json::array sites;
  for (const std::string& s : who.sites) sites.push_back(json::string(s));
  return json::object{{"kind", kind},
                      {"name", who.name},
                      {"tenant", who.tenant},
                      {"domain", who.domain},
                      {"may_read", who.may_read},
                      {"may_reserve", who.may_reserve},
                      {"may_admin", who.may_admin},
                      {"sites", std::move(sites)}};
}

}  // namespace

const std::vector<std::string>& console_page_paths() {
  static const std::vector<std::string> paths = {"/", "/console.js", "/console.css",
                                                 "/favicon.ico"};
  return paths;
}

bool handle_console(agent::Agent& agent, const HttpRequest& request, std::string& route,
                    const std::function<void(HttpResponse)>& send) {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  if (path == "/" || path == "/index.html") {
    route = "/";
    send(get ? page(200, console::index_html(), "text/html; charset=utf-8") : only_get());
    return true;
  }
  if (path == "/console.js") {
    route = path;
    send(get ? page(200, console::console_js(), "text/javascript; charset=utf-8") : only_get());
    return true;
  }
  if (path == "/console.css") {
    route = path;
    send(get ? page(200, console::console_css(), "text/css; charset=utf-8") : only_get());
    return true;
  }
  if (path == "/favicon.ico") {  // asked by every browser: no icon, and no error in its console
    route = path;
    send(get ? page(204, "", "image/x-icon") : only_get());
    return true;
  }
  if (path == "/v1/whoami") {
    route = path;
    send(get ? json_answer(200, identity_json(request.identity)) : only_get());
    return true;
  }
  if (path == "/v1/gateways") {
    route = path;
    send(get ? json_answer(200, agent.gateways_json()) : only_get());
    return true;
  }
  const std::string_view prefix = "/v1/gateways/";
  const std::string_view suffix = "/tunnels";
  if (path.size() > prefix.size() + suffix.size() && path.rfind(prefix, 0) == 0 &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    route = "/v1/gateways/{name}/tunnels";
    if (!get) {
      send(only_get());
      return true;
    }
    const std::string name =
        path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
    send(console_outcome(agent.gateway_tunnels(name)));
    return true;
  }
  if (path == "/v1/calendar") {
    route = path;
    if (!get) {
      send(only_get());
      return true;
    }
    const int64_t horizon_s = seconds(request.query, "horizon_s", 6 * 3600);
    const int64_t step_s = seconds(request.query, "step_s", 600);
    if (horizon_s < 0 || step_s < 0) {
      send(json_answer(
          400, ApiError{400, "invalid_field", "horizon_s and step_s are whole numbers of seconds",
                        horizon_s < 0 ? "horizon_s" : "step_s"}
                   .to_json()));
      return true;
    }
    send(console_outcome(agent.link_calendar(horizon_s * 1'000'000'000, step_s * 1'000'000'000)));
    return true;
  }
  return false;
}

}  // namespace detwan::control::api
