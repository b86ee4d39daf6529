// The archive (docs/control.md, "Archive"): a reservation terminated or failed for
// agent.archive_after leaves the hot state -- memory, the timer's scans, the startup's load --
// into the store's archive, where it is still found by id (GET, a repeated request's
// client_request_id) and listed (GET /v1/reservations?archived=true). Its events stay.
#include <algorithm>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/logging.h"
#include "control/agent/agent_impl.h"
#include "control/reservation/reservation_json.h"

namespace detwan::control::agent {
namespace json = boost::json;
using reservation::Reservation;

namespace {
constexpr size_t kArchiveBatch = 1000;              // reservations per pass
constexpr int64_t kArchivePeriodNs = 10'000'000'000;  // a pass at most this often
common::Result<Reservation> parse_archived(const std::string& body) {
  boost::system::error_code ec;
  const json::value value = json::parse(body, ec);
  if (ec || !value.is_object()) {
    return common::make_error(common::ErrorCode::kIo, "an archived row is not JSON");
  }
  return reservation::from_json(value.as_object());
}

}  // namespace

void Agent::Impl::archive_old(int64_t now_ns) {
  const int64_t after_ns = topology.agent.archive_after_ns;
  if (after_ns <= 0) return;
  const int64_t mono = monotonic->now_ns();
  if (next_archive_mono_ns != 0 && mono < next_archive_mono_ns) return;
  next_archive_mono_ns = mono + kArchivePeriodNs;
  std::vector<journal::ArchivedRow> rows;
  for (const auto& [key, r] : reservations) {
    if (!reservation::is_final(r.state) || r.updated_ns > now_ns - after_ns) continue;
    if (federated_ends.count(r.id) != 0) continue;  // a segment's end still in use
    rows.push_back(journal::ArchivedRow{key, r.id, json::serialize(reservation::to_json(r)),
                                        now_ns});
    if (rows.size() == kArchiveBatch) break;
  }
  if (rows.empty()) return;
  if (auto ok = journal->archive(rows); !ok) {
    ++counters.journal_failures;
    common::logger("detwan-agent")
        ->warn("archiving {} reservations failed ({}); they stay in memory, tried again later",
               rows.size(), ok.error().message);
    return;
  }
  for (const journal::ArchivedRow& row : rows) {
    const auto it = reservations.find(row.key);
    if (it == reservations.end()) continue;
    index_holding(it->second);  // final: out of the pair index (it already is)
    ledger->unbook(row.key);    // final: holds nothing (a no-op)
    reservations.erase(it);
  }
  counters.archived += rows.size();
  common::logger("detwan-agent")
      ->info("archived {} reservations final for more than {} s", rows.size(), after_ns / 1'000'000'000);
}

Outcome<std::optional<Reservation>> Agent::Impl::archived(const std::string& id) const {
  const auto key = key_of_id(id);
  if (!key) return std::optional<Reservation>();
  auto row = journal->find_archived(*key);
  if (!row) {
    return std::unexpected(ApiError{503, "journal_unavailable", row.error().message, ""});
  }
  if (!row->has_value()) return std::optional<Reservation>();
  auto r = parse_archived((*row)->body);
  if (!r) {
    return std::unexpected(ApiError{
        500, "internal", fmt::format("archived {} is unreadable: {}", id, r.error().message), ""});
  }
  return std::optional<Reservation>(std::move(*r));
}

Agent::ListPage Agent::Impl::list_archived(const Agent::ListQuery& query) const {
  constexpr size_t kMaxPage = 10'000;
  const size_t limit = query.limit == 0 ? kMaxPage : std::min(query.limit, kMaxPage);
  Agent::ListPage page;
  uint64_t after = query.after_key;
  while (true) {
    auto rows = journal->archived_after(after, 500);
    if (!rows) {
      page.error = ApiError{503, "journal_unavailable", rows.error().message, ""};
      return page;
    }
    if (rows->empty()) return page;
    for (const journal::ArchivedRow& row : *rows) {
      after = row.key;
      auto r = parse_archived(row.body);
      if (!r) continue;  // unreadable: GET of its id names the problem
      if (query.state && r->state != *query.state) continue;
      if (!query.site.empty() && r->spec.src != query.site && r->spec.dst != query.site) continue;
      if (query.visible && !query.visible(r->tenant)) continue;
      if (page.reservations.size() == limit) {
        page.next = page.reservations.back().as_object().at("id").as_string().c_str();
        return page;
      }
      json::object item = archived_view(*r);
      item.erase("history");
      page.reservations.push_back(std::move(item));
    }
  }
}

json::object Agent::Impl::archived_view(const Reservation& r) const {
  json::object out = view(r);
  out["archived"] = true;
  return out;
}

ApiError Agent::Impl::missing(const std::string& id, std::string_view operation) const {
  auto found = archived(id);
  if (!found) return found.error();
  if (!found->has_value()) return not_found(id);
  return archived_read_only(**found, operation);
}

ApiError archived_read_only(const Reservation& r, std::string_view operation) {
  return ApiError{409, "wrong_state",
                  fmt::format("cannot {} {}: it is {} and archived (read-only)", operation, r.id,
                              reservation::to_string(r.state)),
                  "id"};
}

}  // namespace detwan::control::agent
