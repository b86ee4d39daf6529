// Federation on the agent's side (docs/federation.md): the abstract view, segments held for
// another domain's aggregator, and the journal rows of the federation.
#include <fmt/format.h>

#include "control/agent/agent_impl.h"
#include "control/federation/json_fields.h"
#include "control/federation/view.h"
#include "control/gateway/tunnel_spec.h"
#include "control/reservation/reservation_json.h"

namespace detwan::control::agent {
namespace json = boost::json;
using reservation::Reservation;

namespace {

// The segment's federation row (journal kind "segment"), or an empty object.
json::object segment_row(const Agent::Impl& m, const std::string& id) {
  auto rows = m.journal->federation_rows("segment");
  if (!rows) return {};
  for (const auto& [row_id, body] : *rows) {
    if (row_id != id) continue;
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (!ec && v.is_object()) return v.as_object();
  }
  return {};
}

json::object segment_json(const Agent::Impl& m, const Reservation& r) {
  const model::Topology& t = m.topology;
  json::array gateways;
  json::object public_keys;
  for (const std::string& site : {r.spec.src, r.spec.dst}) {
    const uint32_t s = t.find_site(site);
    if (s == model::kNone || t.sites[s].gateway == model::kNone) continue;
    const std::string& name = t.gateways[t.sites[s].gateway].name;
    gateways.push_back(json::string(name));
    // The far domain's gateway derives the tunnel's keys from this and its own private key.
    public_keys[name] = t.gateways[t.sites[s].gateway].public_key;
  }
  // The prefixes of our own site (not a border) that the segment resolved.
  json::array prefixes;
  const bool src_is_site = t.find_site(r.spec.src) != model::kNone &&
                           t.border_at_site(t.find_site(r.spec.src)) == nullptr;
  for (const std::string& p : src_is_site ? r.spec.src_prefixes : r.spec.dst_prefixes) {
    prefixes.push_back(json::string(p));
  }
  json::object row = segment_row(m, r.id);
  json::object out{{"id", r.id},
                   {"state", reservation::to_string(r.state)},
                   {"reason", r.reason},
                   {"hold_expires_unix_ns", r.hold_expires_ns},
                   {"tunnel_id", r.tunnel_id},
                   {"from", r.spec.src},
                   {"to", r.spec.dst},
                   {"rate_bps", r.spec.min_bandwidth_bps},
                   {"burst_bytes", r.burst_bytes},
                   {"bound", reservation::bound_to_json(r.bound)},
                   {"gateways", std::move(gateways)},
                   {"public_keys", std::move(public_keys)},
                   {"prefixes", std::move(prefixes)},
                   {"client_request_id", r.client_request_id},
                   {"dataplane_active", r.dataplane_active}};
  // What a sender into the tunnel must fit through this domain's links and pay per packet (the
  // aggregator shows the least MTU of all segments: a job's transport sizes its datagrams).
  const json::object local = m.view(r);
  if (const json::value* t = local.if_contains("tunnel"); t != nullptr && t->is_object()) {
    out["tunnel"] = json::object{{"mtu_bytes", t->as_object().at("mtu_bytes")},
                                 {"frame_overhead_bytes",
                                  t->as_object().at("frame_overhead_bytes")}};
  }
  if (!r.keys.keys.empty()) {  // what the aggregator paces a rotation by
    out["key_rotation"] = json::object{{"step", reservation::to_string(r.keys.rotation)},
                                       {"in_place", m.rotation_step_in_place(r)},
                                       {"rotations", r.keys.rotations}};
  }
  if (const json::value* d = row.if_contains("requester_domain")) out["requester_domain"] = *d;
  if (const json::value* a = row.if_contains("aggregate")) out["aggregate"] = *a;
  return out;
}

FederatedEnd federated_end_of(const json::object& commit) {
  FederatedEnd end;
  if (const json::value* g = commit.if_contains("far_gateway"); g != nullptr && g->is_string()) {
    end.far_gateway = std::string(g->as_string());
  }
  if (const json::value* p = commit.if_contains("far_prefixes"); p != nullptr && p->is_array()) {
    for (const json::value& v : p->as_array()) {
      if (v.is_string()) end.far_prefixes.emplace_back(v.as_string());
    }
  }
  if (const json::value* b = commit.if_contains("bound"); b != nullptr && b->is_object()) {
    const json::object& bound = b->as_object();
    const json::value* delivery = bound.if_contains("delivery");
    const json::value* playout = bound.if_contains("playout_bound_ns");
    // From the aggregator's commit (another domain's agent) or its journal row: 1.5 or 1e30
    // would throw from to_number, so a number that is no int64 is no bound (in time).
    const auto playout_ns =
        playout != nullptr ? federation::fields::integer_of<int64_t>(*playout) : std::nullopt;
    if (delivery != nullptr && delivery->is_string() && delivery->as_string() == "on_time" &&
        playout_ns) {
      end.playout_bound_ns = std::max<int64_t>(*playout_ns, 0);
    }
  }
  if (const json::value* k = commit.if_contains("far_public_key"); k != nullptr && k->is_string()) {
    end.far_public_key = std::string(k->as_string());
  }
  if (const json::value* a = commit.if_contains("aggregate"); a != nullptr && a->is_object()) {
    const json::value* id = a->as_object().if_contains("id");
    const json::value* domain = a->as_object().if_contains("domain");
    if (id != nullptr && id->is_string() && domain != nullptr && domain->is_string()) {
      end.key_context = fmt::format("f-{}/{}", std::string_view(id->as_string()),
                                    std::string_view(domain->as_string()));
    }
  }
  return end;
}

}  // namespace

// The keys of a segment's tunnel toward another domain's gateway: by X25519 exchange between
// our gateway's identity key and the far gateway's (the commit carries it), under the context
// both domains derive from the aggregate ("f-<id>/<aggregator domain>"). No agent of either
// owner ever holds a secret of the tunnel; each gateway derives its keys itself.
static Outcome<reservation::TunnelKeys> segment_keys(const model::Topology& t, const Reservation& r,
                                              const FederatedEnd& far) {
  std::string local;
  for (const std::string& site : {r.spec.src, r.spec.dst}) {
    const uint32_t s = t.find_site(site);
    if (s != model::kNone && t.sites[s].gateway != model::kNone) {
      local = t.gateways[t.sites[s].gateway].public_key;
    }
  }
  if (local.empty() || far.far_public_key.empty() || far.key_context.empty()) {
    return std::unexpected(ApiError{
        422, "cross_domain_keys_unavailable",
        fmt::format("{}: an encrypted tunnel to domain gateway '{}' needs both gateways' X25519 "
                    "public keys and the aggregate's context (ours: {}, theirs: {}, context: {})",
                    r.id, far.far_gateway, local.empty() ? "none" : "registered",
                    far.far_public_key.empty() ? "none" : "given",
                    far.key_context.empty() ? "none" : far.key_context),
        "encrypt"});
  }
  auto keys = reservation::x25519_keys(r.spec.encrypt, local, far.far_public_key,
                                       far.key_context, 1);
  if (!keys) {
    return std::unexpected(ApiError{422, "cross_domain_keys_unavailable",
                                    fmt::format("{}: {}", r.id, keys.error().message),
                                    "far_public_key"});
  }
  keys->paced = true;  // the aggregator steps both ends' rotations together
  return *keys;
}

void Agent::Impl::load_federated_ends() {
  auto rows = journal->federation_rows("segment");
  if (!rows) return;
  for (const auto& [id, body] : *rows) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec || !v.is_object()) continue;
    if (const json::value* c = v.as_object().if_contains("commit");
        c != nullptr && c->is_object()) {
      federated_ends[id] = federated_end_of(c->as_object());
    }
  }
}

void Agent::Impl::apply_federated_end(const Reservation& r, const std::string& port,
                                      gateway::TunnelSpec* spec) const {
  const auto it = federated_ends.find(r.id);
  if (it == federated_ends.end() || r.paths.empty()) return;
  const FederatedEnd& far = it->second;
  for (const reservation::EndPlacement& end : r.paths.front().ends) {
    const uint32_t g = topology.find_gateway(end.gateway);
    if (g == model::kNone) continue;  // the border end
    for (const model::GatewayPeer& peer : topology.gateways[g].peers) {
      if (peer.port == port && !peer.remote.empty() && peer.remote == far.far_gateway) {
        spec->peer = peer.name;
      }
    }
  }
  spec->match_dst = far.far_prefixes;
  // set_auth took the peer's key from the reservation's end order; a segment's far end is
  // always the other domain's gateway, whichever end our gateway is.
  if (!spec->key_exchange.empty()) spec->peer_public_key = far.far_public_key;
  spec->bound_ns = far.playout_bound_ns;
  spec->max_hold_ns = std::max<int64_t>(1'000'000'000, 2 * spec->bound_ns);
}

json::object Agent::federation_view() const {
  std::lock_guard lock(impl_->mutex);
  const int64_t now = impl_->realtime->now_ns();
  json::object view = federation::build_view(impl_->topology, *impl_->ledger, now);
  // Compute pools, for co-scheduling across domains: name, site, kind and ranks (no hosts).
  json::array pools;
  for (const auto& [name, pool] : impl_->pools) {
    pools.push_back(
        json::object{{"name", name},
                     {"site", pool.site},
                     {"kind", pool.kind},
                     {"ranks", pool.ranks},
                     {"ranks_next_hour", pool.ranks_during(now, now + 3'600'000'000'000)}});
  }
  view["pools"] = std::move(pools);
  return view;
}

Outcome<json::object> Agent::reserve_segment(const ReserveRequest& request,
                                             json::object federation) {
  if (request.spec.encrypt != reservation::kNoCipher) {
    // An end segment's gateway keys the tunnel by exchange: it needs an identity key.
    const model::Topology& t = impl_->topology;
    for (const std::string& site : {request.spec.src, request.spec.dst}) {
      const uint32_t s = t.find_site(site);
      if (s == model::kNone || t.sites[s].gateway == model::kNone) continue;
      const model::Gateway& g = t.gateways[t.sites[s].gateway];
      if (g.public_key.empty()) {
        return std::unexpected(ApiError{
            422, "cross_domain_keys_unavailable",
            fmt::format("domain {}: gateway '{}' has no public_key (gateways[].public_key, from "
                        "detwan-gw keygen), and an encrypted tunnel to another domain is keyed "
                        "by X25519 exchange",
                        t.domain, g.name),
            "encrypt"});
      }
    }
  }
  auto reserved = reserve(request);
  if (!reserved) return std::unexpected(reserved.error());
  const std::string id(reserved->at("id").as_string());
  {
    std::lock_guard lock(impl_->mutex);
    Impl& m = *impl_;
    json::object row = segment_row(m, id);
    if (row.empty()) {  // not a repeated request: journal the federation data of the segment
      federation["requester_domain"] = request.requester_domain;
      if (auto ok = m.journal->put_federation("segment", id, json::serialize(federation),
                                              m.realtime->now_ns(), 0);
          !ok) {
        ++m.counters.journal_failures;
        return std::unexpected(ApiError{503, "journal_failed", ok.error().message, ""});
      }
    }
  }
  return segment(id);
}

Outcome<json::object> Agent::commit_segment(const std::string& id, json::object commit_info) {
  {
    std::lock_guard lock(impl_->mutex);
    Impl& m = *impl_;
    const Reservation* r = m.find(id);
    if (r == nullptr) return std::unexpected(not_found(id));
    json::object row = segment_row(m, id);
    FederatedEnd far = federated_end_of(commit_info);
    Reservation* mutable_r = m.find(id);
    // A transit segment (a carrier's: border to border) has no gateway and carries ciphertext.
    const auto has_gateway = [&](const std::string& site) {
      const uint32_t s = m.topology.find_site(site);
      return s != model::kNone && m.topology.sites[s].gateway != model::kNone;
    };
    if (r->spec.encrypt != reservation::kNoCipher && r->keys.keys.empty() &&
        (has_gateway(r->spec.src) || has_gateway(r->spec.dst))) {
      auto keys = segment_keys(m.topology, *r, far);
      if (!keys) return std::unexpected(keys.error());
      mutable_r->keys = std::move(*keys);  // journaled with the commit's transition
    }
    m.federated_ends[id] = std::move(far);
    row["commit"] = std::move(commit_info);
    if (auto ok =
            m.journal->put_federation("segment", id, json::serialize(row), m.realtime->now_ns(), 0);
        !ok) {
      ++m.counters.journal_failures;
      return std::unexpected(ApiError{503, "journal_failed", ok.error().message, ""});
    }
  }
  auto committed = commit(id);
  if (!committed) return std::unexpected(committed.error());
  return segment(id);
}

Outcome<json::object> Agent::segment(const std::string& id) const {
  std::lock_guard lock(impl_->mutex);
  const Reservation* r = impl_->find(id);
  if (r == nullptr) return std::unexpected(not_found(id));
  return segment_json(*impl_, *r);
}

std::string Agent::reservation_of_request(const std::string& client_request_id) const {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->requests.find(client_request_id);
  return it == impl_->requests.end() ? "" : it->second.reservation_id;
}

std::string Agent::segment_requester(const std::string& id) const {
  std::lock_guard lock(impl_->mutex);
  const json::object row = segment_row(*impl_, id);
  const json::value* d = row.if_contains("requester_domain");
  return d != nullptr && d->is_string() ? std::string(d->as_string()) : "";
}

Outcome<std::string> Agent::new_federated_id(const std::string& kind, const std::string& body) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  const std::string id = fmt::format("r-{}", m.next_key);
  const uint64_t next = m.next_key + 1;
  std::string text = body;
  // The body names its id: fill the placeholder the caller left.
  json::object object;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    object = v.as_object();
    object["id"] = id;
    text = json::serialize(object);
  }
  if (auto ok = m.journal->put_federation(kind, id, text, m.realtime->now_ns(), next); !ok) {
    ++m.counters.journal_failures;
    return std::unexpected(ApiError{503, "journal_failed", ok.error().message, ""});
  }
  m.next_key = next;
  return id;
}

Outcome<void> Agent::journal_federation(const std::string& kind, const std::string& id,
                                        const std::string& body) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  if (auto ok = m.journal->put_federation(kind, id, body, m.realtime->now_ns(), 0); !ok) {
    ++m.counters.journal_failures;
    return std::unexpected(ApiError{503, "journal_failed", ok.error().message, ""});
  }
  return {};
}

std::vector<std::pair<std::string, std::string>> Agent::federation_rows(
    const std::string& kind) const {
  std::lock_guard lock(impl_->mutex);
  auto rows = impl_->journal->federation_rows(kind);
  return rows ? std::move(*rows) : std::vector<std::pair<std::string, std::string>>{};
}

}  // namespace detwan::control::agent
