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
    public_keys[name] = "";  // filled once gateways have X25519 keys (another part of issue 32)
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
      end.playout_bound_ns = *playout_ns;
    }
  }
  return end;
}

}  // namespace

// TODO(issue 32, X25519 part): the keys of a cross-domain tunnel, agreed from our gateway's
// and the far gateway's public keys: reservation::x25519_keys(cipher, local_public_key,
// remote_public_key, context, key_id) (control/reservation/tunnel_keys.h). Until it is wired,
// no key exists for a cross-domain tunnel and such reservations are refused with 422
// "cross_domain_keys_unavailable" (federation/segments.cc, federation/coordinator.cc).
std::optional<reservation::TunnelKeys> tunnel_auth_for_remote(
    const Reservation& /*segment*/, const std::string& /*local_gateway*/,
    const std::string& /*remote_gateway*/, const std::string& /*remote_public_key*/) {
  return std::nullopt;
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
    m.federated_ends[id] = federated_end_of(commit_info);
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
