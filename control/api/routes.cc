#include "control/api/routes.h"

#include <chrono>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "control/api/requests.h"

namespace detwan::control::api {
namespace json = boost::json;
using agent::ApiError;

namespace {

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

HttpResponse json_response(int status, const json::value& body) {
  HttpResponse r;
  r.status = status;
  r.body = json::serialize(body);
  r.body += '\n';
  return r;
}

HttpResponse error_response(const ApiError& e) { return json_response(e.status, e.to_json()); }

HttpResponse outcome_response(const agent::Outcome<json::object>& outcome, int ok_status = 200) {
  return outcome ? json_response(ok_status, *outcome) : error_response(outcome.error());
}

bool query_flag(const std::string& query, std::string_view key, bool fallback) {
  const std::string on = std::string(key) + "=true";
  const std::string off = std::string(key) + "=false";
  for (size_t start = 0; start <= query.size();) {
    const size_t amp = query.find('&', start);
    const std::string part =
        query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    if (part == on || part == "wait=1") return true;
    if (part == off || part == "wait=0") return false;
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return fallback;
}

std::string query_value(const std::string& query, std::string_view key) {
  const std::string prefix = std::string(key) + "=";
  for (size_t start = 0; start <= query.size();) {
    const size_t amp = query.find('&', start);
    const std::string part =
        query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    if (part.rfind(prefix, 0) == 0) return part.substr(prefix.size());
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return "";
}

HttpResponse method_not_allowed(std::string_view allow) {
  HttpResponse r = json_response(
      405, ApiError{405, "method_not_allowed", fmt::format("allowed: {}", allow), ""}.to_json());
  r.headers.emplace_back("Allow", std::string(allow));
  return r;
}

class Router {
 public:
  Router(agent::Agent& agent, std::string openapi, std::shared_ptr<FederationRoutes> federation)
      : agent_(agent), openapi_(std::move(openapi)), federation_(std::move(federation)) {}

  void handle(HttpRequest request, Respond respond) {
    const int64_t started = monotonic_ns();
    auto route = std::make_shared<std::string>("unknown");
    // Count every answer with its route and status, whenever it goes out.
    auto counted = [this, started, method = request.method, route,
                    respond](HttpResponse response) mutable {
      agent_.count_request(method, *route, response.status, monotonic_ns() - started);
      respond(std::move(response));
    };
    dispatch(request, *route, counted);
  }

 private:
  template <typename Send>
  void dispatch(HttpRequest& request, std::string& route, Send& send) {
    const std::string& path = request.path;
    const std::string& method = request.method;
    if (federation_ && handle_federation(*federation_, agent_, request, route, send)) return;
    if (path == "/healthz") {
      route = "/healthz";
      return method == "GET" ? send(json_response(200, agent_.health()))
                             : send(method_not_allowed("GET"));
    }
    if (path == "/metrics") {
      route = "/metrics";
      if (method != "GET") return send(method_not_allowed("GET"));
      HttpResponse r;
      r.body = agent_.metrics_text();
      r.content_type = "text/plain; version=0.0.4";
      return send(std::move(r));
    }
    if (path == "/openapi.yaml") {
      route = "/openapi.yaml";
      if (method != "GET") return send(method_not_allowed("GET"));
      HttpResponse r;
      r.body = openapi_;
      r.content_type = "application/yaml";
      return send(std::move(r));
    }
    if (path == "/v1/topology") {
      route = "/v1/topology";
      return method == "GET" ? send(json_response(200, agent_.topology_json()))
                             : send(method_not_allowed("GET"));
    }
    if (path == "/v1/paths") {
      route = "/v1/paths";
      if (method != "POST") return send(method_not_allowed("POST"));
      const auto parsed = parse_paths(request.body);
      if (!parsed) return send(error_response(parsed.error()));
      return send(outcome_response(agent_.paths(*parsed)));
    }
    if (path == "/v1/plan") {
      route = "/v1/plan";
      if (method != "POST") return send(method_not_allowed("POST"));
      const auto parsed = parse_plan(request.body);
      if (!parsed) return send(error_response(parsed.error()));
      return send(outcome_response(agent_.plan(*parsed), parsed->reserve ? 201 : 200));
    }
    if (path == "/v1/pools") {
      route = "/v1/pools";
      if (method == "GET") {
        return send(json_response(200, json::object{{"pools", agent_.pools()}}));
      }
      if (method != "POST") return send(method_not_allowed("GET, POST"));
      auto parsed = parse_pool(request.body);
      if (!parsed) return send(error_response(parsed.error()));
      return send(outcome_response(agent_.register_pool(std::move(*parsed)), 201));
    }
    if (path.rfind("/v1/pools/", 0) == 0) {
      route = "/v1/pools/{name}";
      const std::string name = path.substr(std::string("/v1/pools/").size());
      if (method == "GET") return send(outcome_response(agent_.pool(name)));
      if (method == "DELETE") return send(outcome_response(agent_.remove_pool(name)));
      return send(method_not_allowed("GET, DELETE"));
    }
    const std::string base = "/v1/reservations";
    if (path == base) {
      route = base;
      if (method == "GET") {
        const std::string state_text = query_value(request.query, "state");
        std::optional<reservation::State> state;
        if (!state_text.empty()) {
          state = reservation::state_from_string(state_text);
          if (!state) {
            return send(error_response(
                ApiError{400, "invalid_field", fmt::format("state '{}' is not a state", state_text),
                         "state"}));
          }
        }
        return send(json_response(200, json::object{{"reservations", agent_.list(state)}}));
      }
      if (method != "POST") return send(method_not_allowed("GET, POST"));
      const auto parsed = parse_reserve(request.body);
      if (!parsed) return send(error_response(parsed.error()));
      auto reserved = agent_.reserve(*parsed);
      if (!reserved) return send(error_response(reserved.error()));
      if (!parsed->provision || !query_flag(request.query, "wait", true)) {
        return send(json_response(201, *reserved));
      }
      const std::string id(reserved->at("id").as_string());
      agent_.when_active(id, agent_.topology().agent.provision_wait_ns,
                         [send](json::object body) mutable { send(json_response(201, body)); });
      return;
    }
    if (path.rfind(base + "/", 0) != 0) {
      route = "unknown";
      return send(error_response(ApiError{404, "not_found", fmt::format("no route {}", path), ""}));
    }
    const std::string rest = path.substr(base.size() + 1);
    const size_t slash = rest.find('/');
    const std::string id = rest.substr(0, slash);
    const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (action.empty()) {
      route = base + "/{id}";
      if (method == "GET") return send(outcome_response(agent_.get(id)));
      if (method == "DELETE") return send(outcome_response(agent_.terminate(id)));
      if (method == "PATCH") {
        const auto parsed = parse_modify(request.body);
        if (!parsed) return send(error_response(parsed.error()));
        return send(outcome_response(agent_.modify(id, *parsed)));
      }
      return send(method_not_allowed("GET, PATCH, DELETE"));
    }
    route = base + "/{id}/" + action;
    if (method != "POST") return send(method_not_allowed("POST"));
    if (action == "commit") return send(outcome_response(agent_.commit(id)));
    if (action == "abort") return send(outcome_response(agent_.abort(id)));
    if (action == "release") return send(outcome_response(agent_.release(id)));
    if (action == "terminate") return send(outcome_response(agent_.terminate(id)));
    if (action == "rotate-key") return send(outcome_response(agent_.rotate_key(id)));
    if (action == "provision") {
      auto provisioned = agent_.provision(id);
      if (!provisioned) return send(error_response(provisioned.error()));
      if (!query_flag(request.query, "wait", true)) return send(json_response(200, *provisioned));
      agent_.when_active(id, agent_.topology().agent.provision_wait_ns,
                         [send](json::object body) mutable { send(json_response(200, body)); });
      return;
    }
    route = "unknown";
    return send(error_response(ApiError{
        404, "not_found",
        fmt::format("no action '{}' (commit, abort, provision, release, terminate, rotate-key)",
                    action),
        ""}));
  }

  agent::Agent& agent_;
  std::string openapi_;
  std::shared_ptr<FederationRoutes> federation_;
};

}  // namespace

Handler make_handler(agent::Agent& agent, std::string openapi) {
  auto federation = make_federation_routes(agent, nullptr);
  return make_handler(agent, std::move(openapi),
                      federation ? *federation : std::make_shared<FederationRoutes>());
}

Handler make_handler(agent::Agent& agent, std::string openapi,
                     std::shared_ptr<FederationRoutes> federation) {
  auto router = std::make_shared<Router>(agent, std::move(openapi), std::move(federation));
  return [router](HttpRequest request, Respond respond) {
    router->handle(std::move(request), std::move(respond));
  };
}

}  // namespace detwan::control::api
