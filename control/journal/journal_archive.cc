// The journal's archive (journal.h): reservations final for a while, moved out of the rows the
// agent loads at startup, still found by key and listed in key order.
#include <fmt/format.h>
#include <sqlite3.h>

#include "control/journal/journal.h"
#include "control/journal/sqlite_text.h"

namespace detwan::control::journal {

common::Result<void> Journal::archive(const std::vector<ArchivedRow>& rows) {
  if (rows.empty()) return {};
  sqlite3_stmt* insert = nullptr;
  sqlite3_stmt* remove = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO archive (key, id, body, at_unix_ns) "
                         "VALUES (?1, ?2, ?3, ?4)",
                         -1, &insert, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db_, "DELETE FROM reservations WHERE id = ?1", -1, &remove, nullptr) !=
          SQLITE_OK) {
    const common::Error failure = error("prepare archive");
    sqlite3_finalize(insert);
    sqlite3_finalize(remove);
    return std::unexpected(failure);
  }
  auto step = [](sqlite3_stmt* statement) {
    const bool done = sqlite3_step(statement) == SQLITE_DONE;
    sqlite3_reset(statement);
    sqlite3_clear_bindings(statement);
    return done;
  };
  auto ok = exec("BEGIN IMMEDIATE");
  bool written = static_cast<bool>(ok);
  for (size_t i = 0; written && i < rows.size(); ++i) {
    const ArchivedRow& row = rows[i];
    sqlite3_bind_int64(insert, 1, static_cast<sqlite3_int64>(row.key));
    detail::bind_text(insert, 2, row.id);
    detail::bind_text(insert, 3, row.body);
    sqlite3_bind_int64(insert, 4, row.at_ns);
    written = step(insert);
    if (written) {
      detail::bind_text(remove, 1, row.id);
      written = step(remove);
    }
  }
  const common::Error failure = error(fmt::format("archive {} reservations", rows.size()));
  sqlite3_finalize(insert);
  sqlite3_finalize(remove);
  if (!ok) return ok;
  return finish(written, failure);
}

common::Result<std::vector<ArchivedRow>> Journal::archived_after(uint64_t after_key,
                                                                 size_t limit) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "SELECT key, id, body, at_unix_ns FROM archive WHERE key > ?1 "
                         "ORDER BY key LIMIT ?2",
                         -1, &s, nullptr) != SQLITE_OK) {
    return std::unexpected(error("read archive"));
  }
  sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(after_key));
  sqlite3_bind_int64(s, 2, static_cast<sqlite3_int64>(limit));
  std::vector<ArchivedRow> rows;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    rows.push_back(ArchivedRow{static_cast<uint64_t>(sqlite3_column_int64(s, 0)),
                               detail::column_text(s, 1), detail::column_text(s, 2),
                               sqlite3_column_int64(s, 3)});
  }
  const common::Error failure = error("read archive");
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) return std::unexpected(failure);
  return rows;
}

common::Result<std::optional<ArchivedRow>> Journal::find_archived(uint64_t key) {
  if (key == 0) return std::nullopt;
  auto rows = archived_after(key - 1, 1);
  if (!rows) return std::unexpected(rows.error());
  if (rows->empty() || rows->front().key != key) return std::nullopt;
  return std::move(rows->front());
}

}  // namespace detwan::control::journal
