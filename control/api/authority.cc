// Authority decisions on a request's Identity (authority.h).
#include "control/api/authority.h"

#include <algorithm>

#include <fmt/format.h>

namespace detwan::control::api {

std::string tenant_of(const Identity& who) {
  return who.kind == Identity::Kind::kToken ? who.tenant : "";
}

bool may_act_on(const Identity& who, std::string_view reservation_tenant) {
  switch (who.kind) {
    case Identity::Kind::kAnonymous:
      return true;
    case Identity::Kind::kToken:
      return who.may_admin || who.tenant == reservation_tenant;
    case Identity::Kind::kPeer:
      return false;  // the federation routes decide by domain
  }
  return false;
}

bool may_act_on(const Identity& who, const reservation::Reservation& reservation) {
  return may_act_on(who, reservation.tenant);
}

std::optional<std::string> site_refusal(const Identity& who, std::string_view src,
                                        std::string_view dst) {
  if (who.kind != Identity::Kind::kToken || who.sites.empty()) return std::nullopt;
  for (const std::string_view site : {src, dst}) {
    if (std::find(who.sites.begin(), who.sites.end(), site) == who.sites.end()) {
      std::string allowed;
      for (const std::string& s : who.sites) allowed += (allowed.empty() ? "" : ", ") + s;
      return fmt::format("{} may not reserve at site '{}' (its sites: {})", describe(who), site,
                         allowed);
    }
  }
  return std::nullopt;
}

bool peer_route(std::string_view method, std::string_view path) {
  if (path.substr(0, 15) == "/v1/federation/") return true;
  return method == "GET" && (path == "/healthz" || path == "/v1/policy");
}

std::string describe(const Identity& who) {
  switch (who.kind) {
    case Identity::Kind::kAnonymous:
      return "anonymous client";
    case Identity::Kind::kToken:
      return fmt::format("token '{}' (tenant '{}')", who.name,
                         who.tenant.empty() ? "*" : who.tenant);
    case Identity::Kind::kPeer:
      return fmt::format("peer domain '{}' ({})", who.domain, who.name);
  }
  return "?";
}

}  // namespace detwan::control::api
