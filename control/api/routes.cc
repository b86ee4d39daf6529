#include "control/api/routes.h"

#include <charconv>
#include <chrono>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/logging.h"
#include "common/strings.h"
#include "control/api/authority.h"
#include "control/api/console_routes.h"
#include "control/api/requests.h"
#include "control/policy/policy.h"

namespace detwan::control::api {
namespace json = boost::json;
using agent::ApiError;

namespace {

// ?after=ID&limit=N of GET /v1/reservations (1 <= N <= kMaxPage; no limit: every one).
constexpr size_t kMaxPage = 10000;
agent::Outcome<void> page_of(const std::string& query_text, agent::Agent::ListQuery& query) {
  const std::string after = common::query_value(query_text, "after");
  if (!after.empty()) {
    uint64_t key = 0;
    const bool ok = after.size() > 2 && after.rfind("r-", 0) == 0 &&
                    std::from_chars(after.data() + 2, after.data() + after.size(), key).ec ==
                        std::errc{} &&
                    after.find_first_not_of("0123456789", 2) == std::string::npos;
    if (!ok) {
      return std::unexpected(agent::ApiError{
          400, "invalid_field", fmt::format("after '{}' is not a reservation id (r-N)", after),
          "after"});
    }
    query.after_key = key;
  }
  const std::string limit = common::query_value(query_text, "limit");
  if (!limit.empty()) {
    size_t n = 0;
    if (std::from_chars(limit.data(), limit.data() + limit.size(), n).ec != std::errc{} ||
        limit.find_first_not_of("0123456789") != std::string::npos || n < 1 || n > kMaxPage) {
      return std::unexpected(agent::ApiError{
          400, "invalid_field", fmt::format("limit '{}': a number from 1 to {}", limit, kMaxPage),
          "limit"});
    }
    query.limit = n;
  }
  return {};
}


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
  // 403: logged with the identity refused, counted (cause "forbidden").
  template <typename Send>
  void forbid(const HttpRequest& request, Send& send, const std::string& message) {
    common::logger("detwan-agent")
        ->warn("403 forbidden: {} from {}: {} {}: {}", describe(request.identity), request.client,
               request.method, request.path, message);
    agent_.count_refused("forbidden");
    send(error_response(ApiError{403, "forbidden", message, ""}));
  }

  // The tenant of reservation `id` when `who` may not act on it (std::nullopt: it may, or there
  // is no such reservation and the agent's own 404 follows).
  std::optional<std::string> foreign_tenant(const Identity& who, const std::string& id) {
    if (who.kind == Identity::Kind::kAnonymous) return std::nullopt;
    const auto current = agent_.get(id);
    if (!current) return std::nullopt;
    const json::value* tenant = current->if_contains("tenant");
    const std::string held_by =
        tenant != nullptr && tenant->is_string() ? std::string(tenant->as_string()) : std::string();
    if (may_act_on(who, held_by)) return std::nullopt;
    return held_by;
  }

  template <typename Send>
  void dispatch(HttpRequest& request, std::string& route, Send& send) {
    const std::string& path = request.path;
    const std::string& method = request.method;
    const Identity& who = request.identity;
    if (who.kind == Identity::Kind::kPeer && !peer_route(method, path)) {
      return forbid(request, send,
                    fmt::format("{} may only use /v1/federation/..., GET /healthz and GET "
                                "/v1/policy",
                                describe(who)));
    }
    if (federation_ && handle_federation(*federation_, agent_, request, route, send)) return;
    if (method == "GET" && !who.may_read && path != "/healthz") {
      return forbid(request, send, fmt::format("{} may not read", describe(who)));
    }
    if (handle_console(agent_, request, route,
                       [&send](HttpResponse response) { send(std::move(response)); })) {
      return;
    }
    if (path == "/v1/policy") {
      route = "/v1/policy";
      if (method != "GET") return send(method_not_allowed("GET"));
      policy::PolicyView view;
      view.all = who.kind == Identity::Kind::kAnonymous ||
                 (who.kind == Identity::Kind::kToken && who.may_admin);
      view.tenant = tenant_of(who);
      view.domain = who.kind == Identity::Kind::kPeer ? who.domain : "";
      return send(json_response(200, policy::policy_json(agent_.topology().policy, view)));
    }
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
    if (path == "/v1/stats") {
      route = "/v1/stats";
      return method == "GET" ? send(json_response(200, agent_.stats()))
                             : send(method_not_allowed("GET"));
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
      auto parsed = parse_plan(request.body);
      if (!parsed) return send(error_response(parsed.error()));
      if (parsed->reserve) {
        if (!who.may_reserve) {
          return forbid(request, send, fmt::format("{} may not reserve", describe(who)));
        }
        // A token limited to some sites plans among them only.
        if (who.kind == Identity::Kind::kToken && !who.sites.empty()) {
          if (parsed->sites.empty()) parsed->sites = who.sites;
          for (const std::string& site : parsed->sites) {
            if (auto refused = site_refusal(who, site, site))
              return forbid(request, send, *refused);
          }
        }
        parsed->tenant = tenant_of(who);
      }
      return send(outcome_response(agent_.plan(*parsed), parsed->reserve ? 201 : 200));
    }
    if (path == "/v1/pools") {
      route = "/v1/pools";
      if (method == "GET") {
        return send(json_response(200, json::object{{"pools", agent_.pools()}}));
      }
      if (method != "POST") return send(method_not_allowed("GET, POST"));
      if (!who.may_admin) {
        return forbid(request, send,
                      fmt::format("{} may not register pools (admin)", describe(who)));
      }
      auto parsed = parse_pool(request.body);
      if (!parsed) return send(error_response(parsed.error()));
      return send(outcome_response(agent_.register_pool(std::move(*parsed)), 201));
    }
    if (path.rfind("/v1/pools/", 0) == 0) {
      route = "/v1/pools/{name}";
      const std::string name = path.substr(std::string("/v1/pools/").size());
      if (method == "GET") return send(outcome_response(agent_.pool(name)));
      if (method == "DELETE") {
        if (!who.may_admin) {
          return forbid(request, send,
                        fmt::format("{} may not remove pools (admin)", describe(who)));
        }
        return send(outcome_response(agent_.remove_pool(name)));
      }
      return send(method_not_allowed("GET, DELETE"));
    }
    const std::string base = "/v1/reservations";
    if (path == base) {
      route = base;
      if (method == "GET") {
        const std::string state_text = common::query_value(request.query, "state");
        std::optional<reservation::State> state;
        if (!state_text.empty()) {
          state = reservation::state_from_string(state_text);
          if (!state) {
            return send(error_response(
                ApiError{400, "invalid_field", fmt::format("state '{}' is not a state", state_text),
                         "state"}));
          }
        }
        agent::Agent::ListQuery query;
        query.state = state;
        query.site = common::query_value(request.query, "site");
        if (who.kind != Identity::Kind::kAnonymous && !who.may_admin) {
          // A tenant's token sees its own reservations only.
          query.visible = [&who](const std::string& tenant) { return may_act_on(who, tenant); };
        }
        if (auto paging = page_of(request.query, query); !paging) {
          return send(error_response(paging.error()));
        }
        query.archived = query_flag(request.query, "archived", false);
        agent::Agent::ListPage page = agent_.list_page(query);
        if (page.error) return send(error_response(*page.error));
        json::object body{{"reservations", std::move(page.reservations)}};
        if (!page.next.empty()) body["next"] = page.next;
        return send(json_response(200, std::move(body)));
      }
      if (method != "POST") return send(method_not_allowed("GET, POST"));
      auto parsed = parse_reserve(request.body);
      if (!parsed) return send(error_response(parsed.error()));
      if (!who.may_reserve) {
        return forbid(request, send, fmt::format("{} may not reserve", describe(who)));
      }
      if (auto refused = site_refusal(who, parsed->spec.src, parsed->spec.dst)) {
        return forbid(request, send, *refused);
      }
      parsed->tenant = tenant_of(who);
      auto reserved = agent_.reserve(*parsed);
      if (!reserved) return send(error_response(reserved.error()));
      // A client_request_id another tenant used answers with that tenant's reservation: not ours.
      if (const json::value* tenant = reserved->if_contains("tenant");
          tenant != nullptr && tenant->is_string() &&
          !may_act_on(who, std::string_view(tenant->as_string()))) {
        return forbid(request, send,
                      fmt::format("{}: client_request_id '{}' belongs to a reservation of tenant "
                                  "'{}'",
                                  describe(who), parsed->client_request_id, tenant->as_string()));
      }
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
    if (const auto held_by = foreign_tenant(who, id)) {
      route = action.empty() ? base + "/{id}" : base + "/{id}/" + action;
      return forbid(request, send,
                    fmt::format("{} may not act on {} (tenant '{}')", describe(who), id,
                                held_by->empty() ? "*" : *held_by));
    }
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
