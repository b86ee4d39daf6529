// /v1/federation/* and the federated reservations on /v1/reservations (docs/federation.md).
#include "control/api/federation_routes.h"

#include <memory>
#include <set>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/logging.h"
#include "control/api/requests.h"
#include "control/federation/segments.h"

namespace detwan::control::api {
namespace json = boost::json;
using agent::ApiError;

namespace {

HttpResponse answer(int status, const json::object& body) {
  HttpResponse r;
  r.status = status;
  r.body = json::serialize(body) + "\n";
  return r;
}
// A federated reservation's error names the domain at fault ("domain w: ..."): said as a field
// too, so that a client need not parse the message.
HttpResponse error(const ApiError& e) {
  json::object body = e.to_json();
  if (e.message.rfind("domain ", 0) == 0) {
    const size_t colon = e.message.find(':');
    if (colon != std::string::npos) {
      body["error"].as_object()["domain"] = e.message.substr(7, colon - 7);
    }
  }
  return answer(e.status, body);
}
HttpResponse outcome(const agent::Outcome<json::object>& o, int ok = 200) {
  return o ? answer(ok, *o) : error(o.error());
}

// The peer domain a request comes from: its certificate's, or its token's ("" = not a peer).
std::string peer_domain(const FederationRoutes& f, const model::Topology& t,
                        const HttpRequest& request) {
  if (request.identity.kind == Identity::Kind::kPeer) {
    // Listed in federation.peers, and its certificate issued by the CA listed for that domain
    // (agent.tls.client_ca trusts every peer's CA; each may sign any name).
    if (t.federation.peer(request.identity.domain) == nullptr) return "";
    const auto cas = f.peer_ca_sha256.find(request.identity.domain);
    return cas != f.peer_ca_sha256.end() && cas->second.count(request.identity.issuer_sha256) > 0
               ? request.identity.domain
               : "";
  }
  return federation::domain_of_token(f.accept_tokens, request.bearer_token);
}

// SHA-256 of every certificate in a PEM file (errors name the file).
common::Result<std::set<std::string>> ca_fingerprints(const std::string& path) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(path.c_str(), "r"), &BIO_free);
  if (!bio) return std::unexpected(common::Error{common::ErrorCode::kConfig, fmt::format("cannot read {}", path)});
  std::set<std::string> out;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    out.insert(certificate_sha256(cert));
    X509_free(cert);
  }
  ERR_clear_error();  // the loop ends on "no start line"
  if (out.empty()) {
    return std::unexpected(
        common::Error{common::ErrorCode::kConfig, fmt::format("{} holds no PEM certificate", path)});
  }
  return out;
}

std::string caller_name(const HttpRequest& request) {
  switch (request.identity.kind) {
    case Identity::Kind::kPeer:
      return "peer '" + request.identity.name + "' (certificate for domain '" +
             request.identity.domain + "')";
    case Identity::Kind::kToken:
      return "token" + (request.identity.tenant.empty()
                            ? ""
                            : " of tenant '" + request.identity.tenant + "'");
    case Identity::Kind::kAnonymous:
      break;
  }
  return "anonymous client " + request.client;
}

}  // namespace

common::Result<std::shared_ptr<FederationRoutes>> make_federation_routes(
    agent::Agent& agent, federation::Coordinator* coordinator) {
  auto f = std::make_shared<FederationRoutes>();
  f->coordinator = coordinator;
  auto tokens = federation::load_accept_tokens(agent.topology().federation);
  if (!tokens) return std::unexpected(tokens.error());
  f->accept_tokens = std::move(*tokens);
  for (const model::FederationPeer& p : agent.topology().federation.peers) {
    if (p.ca.empty()) continue;  // a plain-HTTP peer (tokens only): no certificate is its
    auto cas = ca_fingerprints(p.ca);
    if (!cas) {
      return std::unexpected(common::Error{common::ErrorCode::kConfig,
          fmt::format("federation.peers[{}].ca: {}", p.domain, cas.error().message)});
    }
    f->peer_ca_sha256[p.domain] = std::move(*cas);
  }
  return f;
}

namespace {

bool handle_federation_unguarded(FederationRoutes& f, agent::Agent& agent, HttpRequest& request,
                                 std::string& route, const Respond& send) {
  const std::string& path = request.path;
  const std::string& method = request.method;
  const std::string prefix = "/v1/federation/";
  if (path.rfind(prefix, 0) == 0) {
    const std::string peer = peer_domain(f, agent.topology(), request);
    const bool admin = request.identity.kind != Identity::Kind::kPeer &&
                       request.identity.may_admin && request.identity.tenant.empty() &&
                       request.identity.kind == Identity::Kind::kToken;
    if (path == "/v1/federation/view") {
      route = "/v1/federation/view";
      if (method != "GET") {
        send(error(ApiError{405, "method_not_allowed", "allowed: GET", ""}));
        return true;
      }
      if (peer.empty() && !admin) {
        send(error(ApiError{403, "forbidden",
                            fmt::format("{} is neither a federation peer of domain '{}' nor an "
                                        "admin token",
                                        caller_name(request), agent.topology().domain),
                            ""}));
        return true;
      }
      send(answer(200, agent.federation_view()));
      return true;
    }
    const std::string segments = "/v1/federation/segments";
    if (path.rfind(segments, 0) == 0) {
      route = path == segments ? segments : segments + "/{id}";
      if (peer.empty()) {
        send(error(ApiError{403, "forbidden",
                            fmt::format("{} is not a federation peer of domain '{}'",
                                        caller_name(request), agent.topology().domain),
                            ""}));
        return true;
      }
      const federation::Answer a = federation::handle_segment_call(
          agent, peer, method, path.substr(segments.size()), request.query, request.body);
      send(answer(a.status, a.body));
      return true;
    }
    return false;
  }
  if (f.coordinator == nullptr) return false;
  federation::Coordinator& c = *f.coordinator;
  if (path == "/v1/plan" && method == "POST" &&
      request.query.find("federated=true") != std::string::npos) {
    route = "/v1/plan (federated)";
    auto parsed = parse_plan(request.body);
    if (!parsed) return send(error(parsed.error())), true;
    if (parsed->reserve && !request.identity.may_reserve) {
      send(error(ApiError{403, "forbidden", "this identity may not reserve", ""}));
      return true;
    }
    send(outcome(c.plan(*parsed), parsed->reserve ? 201 : 200));
    return true;
  }
  const std::string base = "/v1/reservations";
  if (path == base && method == "GET") {  // the local reservations and the federated ones
    std::string state;
    const std::string key = "state=";
    for (size_t at = request.query.find(key); at != std::string::npos;) {
      if (at == 0 || request.query[at - 1] == '&') {
        state =
            request.query.substr(at + key.size(), request.query.find('&', at) - at - key.size());
      }
      break;
    }
    std::optional<reservation::State> local_state;
    if (!state.empty()) {
      local_state = reservation::state_from_string(state);
      if (!local_state && state != "reserving" && state != "committing") return false;
    }
    json::array all = state.empty() || local_state ? agent.list(local_state) : json::array{};
    for (json::value& a : c.list()) {
      if (state.empty() || a.at("state").as_string() == state) all.push_back(std::move(a));
    }
    route = base;
    send(answer(200, json::object{{"reservations", std::move(all)}}));
    return true;
  }
  if (path == base && method == "POST") {
    auto parsed = parse_reserve(request.body);
    if (!parsed || !c.is_federated(*parsed)) return false;  // local (or the local error)
    if (!request.identity.may_reserve) {
      send(error(ApiError{403, "forbidden", "this identity may not reserve", ""}));
      return true;
    }
    route = base + " (federated)";
    send(outcome(c.reserve(*parsed), 201));
    return true;
  }
  if (path.rfind(base + "/", 0) != 0) return false;
  const std::string rest = path.substr(base.size() + 1);
  const size_t slash = rest.find('/');
  const std::string id = rest.substr(0, slash);
  if (!c.owns(id)) return false;
  const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
  route = base + "/{id}" + (action.empty() ? "" : "/" + action) + " (federated)";
  if (method != "GET" && !request.identity.may_reserve) {
    send(error(ApiError{403, "forbidden", "this identity may not change reservations", ""}));
    return true;
  }
  if (action.empty()) {
    if (method == "GET") return send(outcome(c.get(id))), true;
    if (method == "DELETE") return send(outcome(c.terminate(id))), true;
    if (method == "PATCH") {
      auto parsed = parse_modify(request.body);
      if (!parsed) return send(error(parsed.error())), true;
      return send(outcome(c.modify(id, *parsed))), true;
    }
    send(error(ApiError{405, "method_not_allowed", "allowed: GET, PATCH, DELETE", ""}));
    return true;
  }
  if (method != "POST") {
    send(error(ApiError{405, "method_not_allowed", "allowed: POST", ""}));
    return true;
  }
  if (action == "commit") return send(outcome(c.commit(id))), true;
  if (action == "abort") return send(outcome(c.abort(id))), true;
  if (action == "provision") return send(outcome(c.provision(id))), true;
  if (action == "release") return send(outcome(c.release(id))), true;
  if (action == "terminate") return send(outcome(c.terminate(id))), true;
  if (action == "rotate-key") return send(outcome(c.rotate_key(id))), true;
  send(error(ApiError{404, "not_found", fmt::format("no action '{}'", action), ""}));
  return true;
}

}  // namespace

bool handle_federation(FederationRoutes& f, agent::Agent& agent, HttpRequest& request,
                       std::string& route, const Respond& send) {
  // The boundary of what peers (other owners' agents) send us and answer: the federation code
  // checks their JSON field by field and throws nothing; should something slip through all the
  // same, this request is answered 500 and logged instead of the exception ending the agent
  // (the HTTP server's threads do not catch).
  bool sent = false;
  const Respond once = [&](HttpResponse r) {
    sent = true;
    send(std::move(r));
  };
  try {
    return handle_federation_unguarded(f, agent, request, route, once);
  } catch (const std::exception& e) {
    common::logger("detwan-agent")
        ->error("{} {}: unexpected exception in the federation routes: {}", request.method,
                request.path, e.what());
    if (route.empty()) route = "/v1/federation (exception)";
    if (!sent) {
      send(error(ApiError{
          500, "internal",
          fmt::format("internal error handling {} {}: {}", request.method, request.path, e.what()),
          ""}));
    }
    return true;
  }
}

}  // namespace detwan::control::api
