#include "control/journal/store.h"

namespace detwan::control::journal {

common::Result<Snapshot> snapshot_of(Store& store) {
  Snapshot snapshot;
  auto loaded = store.load();
  if (!loaded) return std::unexpected(loaded.error());
  snapshot.state = std::move(*loaded);
  auto events = store.for_each_event([&](const Event& e) { snapshot.events.push_back(e); });
  if (!events) return std::unexpected(events.error());
  // The kinds the agent writes (docs/federation.md): its aggregates and its segments.
  for (const char* kind : {"aggregate", "segment"}) {
    auto rows = store.federation_rows(kind);
    if (!rows) return std::unexpected(rows.error());
    for (auto& [id, body] : *rows) snapshot.federation.push_back({kind, id, std::move(body)});
  }
  for (uint64_t after = 0;;) {
    auto page = store.archived_after(after, 500);
    if (!page) return std::unexpected(page.error());
    if (page->empty()) break;
    after = page->back().key;
    for (ArchivedRow& row : *page) snapshot.archived.push_back(std::move(row));
  }
  return snapshot;
}

}  // namespace detwan::control::journal
