#include "control/journal/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <string_view>

#include <fmt/format.h>
#include <sqlite3.h>

#include "control/journal/sqlite_text.h"

namespace detwan::control::journal {
namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reservations (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  at_unix_ns INTEGER NOT NULL,
  id TEXT NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
  client_request_id TEXT PRIMARY KEY,
  fingerprint TEXT NOT NULL,
  reservation_id TEXT NOT NULL,
  at_unix_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pools (name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS archive (
  key INTEGER PRIMARY KEY,
  id TEXT NOT NULL,
  body TEXT NOT NULL,
  at_unix_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS federation (
  kind TEXT NOT NULL,
  id TEXT NOT NULL,
  body TEXT NOT NULL,
  at_unix_ns INTEGER NOT NULL,
  PRIMARY KEY (kind, id));
)sql";

// The events keep every transition for audit and replay (journal-check), but never a key: a
// tunnel key is in the journal only while it is the current or the previous one of its
// reservation, in the `reservations` row. The secrets are removed as the row is written; the
// fingerprints stay. (A reservation holds at most two keys, during a rotation.)
constexpr const char* kWithoutSecrets =
    "CASE WHEN json_valid(?6) THEN json_remove(?6, '$.tunnel_keys.keys[3].secret', "
    "'$.tunnel_keys.keys[2].secret', '$.tunnel_keys.keys[1].secret', "
    "'$.tunnel_keys.keys[0].secret') ELSE ?6 END";

// Creates the journal file readable and writable by its owner only, or makes an existing one
// so, on the descriptor (not chmod by path: the path could name another file by then), before
// SQLite opens it. A journal owned by another user is refused: it is not ours to trust.
common::Result<void> make_private(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                        S_IRUSR | S_IWUSR);
  if (fd < 0) {
    return common::make_error(common::ErrorCode::kIo, fmt::format("journal {}: cannot open: {}",
                                                                  path, std::strerror(errno)));
  }
  struct stat info {};
  common::Result<void> result;
  if (::fstat(fd, &info) != 0) {
    result = common::make_error(common::ErrorCode::kIo,
                                fmt::format("journal {}: fstat: {}", path, std::strerror(errno)));
  } else if (!S_ISREG(info.st_mode)) {
    result = common::make_error(common::ErrorCode::kConfig,
                                fmt::format("journal {}: not a regular file", path));
  } else if (info.st_uid != ::geteuid()) {
    result = common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("journal {} belongs to uid {}, not to the agent's uid {}: refused", path,
                    info.st_uid, ::geteuid()));
  } else if ((info.st_mode & 07777) != (S_IRUSR | S_IWUSR) &&
             ::fchmod(fd, S_IRUSR | S_IWUSR) != 0) {
    result = common::make_error(
        common::ErrorCode::kIo,
        fmt::format("journal {}: cannot make it private (fchmod 0600): {}", path,
                    std::strerror(errno)));
  }
  ::close(fd);
  return result;
}

}  // namespace

using detail::bind_text;
using detail::column_text;

common::Error Journal::error(const std::string& what) const {
  return common::Error{common::ErrorCode::kIo,
                       fmt::format("journal {}: {}: {}", path_, what, sqlite3_errmsg(db_))};
}

common::Result<void> Journal::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message != nullptr ? message : "unknown error";
    sqlite3_free(message);
    return common::make_error(common::ErrorCode::kIo, fmt::format("journal {}: {}", path_, text));
  }
  return {};
}

common::Result<std::unique_ptr<Journal>> Journal::open(const std::string& path, bool sync_full,
                                                       const std::string& domain) {
  // It holds the tunnel keys of encrypted reservations: readable by the agent's user only
  // (SQLite gives its -wal and -shm files the same mode).
  if (path != ":memory:") {
    if (auto ok = make_private(path); !ok) return std::unexpected(ok.error());
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<Journal> journal(new Journal(path, db));
  if (rc != SQLITE_OK) return std::unexpected(journal->error("cannot open"));
  sqlite3_busy_timeout(db, 5000);
  // secure_delete: what a write frees (a replaced reservation row with its previous keys) is
  // overwritten with zeros, not left in a free page of the file.
  for (const char* sql :
       {"PRAGMA secure_delete=ON;", "PRAGMA journal_mode=WAL;",
        sync_full ? "PRAGMA synchronous=FULL;" : "PRAGMA synchronous=NORMAL;", kSchema}) {
    if (auto ok = journal->exec(sql); !ok) return std::unexpected(ok.error());
  }
  // A journal written before the events lost their secrets: remove them now, rebuild the file
  // without its free pages and empty the WAL, so no old key is left anywhere in it.
  if (auto scrubbed = journal->scrub_event_secrets(); !scrubbed) {
    return std::unexpected(scrubbed.error());
  }
  // Schema version and domain: a journal of another domain is refused, not mixed in.
  sqlite3_stmt* read = nullptr;
  sqlite3_prepare_v2(db, "SELECT key, value FROM meta", -1, &read, nullptr);
  std::string found_domain;
  std::string found_version;
  while (sqlite3_step(read) == SQLITE_ROW) {
    const std::string key = column_text(read, 0);
    if (key == "domain") found_domain = column_text(read, 1);
    if (key == "schema_version") found_version = column_text(read, 1);
  }
  sqlite3_finalize(read);
  if (found_domain.empty()) {
    // Bound, not pasted: a domain is any string ("o'neil's lab" must not break the SQL).
    sqlite3_stmt* init = nullptr;
    bool ok = sqlite3_prepare_v2(db,
                                 "INSERT OR REPLACE INTO meta VALUES ('domain', ?), "
                                 "('schema_version', ?), ('next_key', '1')",
                                 -1, &init, nullptr) == SQLITE_OK;
    if (ok) {
      bind_text(init, 1, domain);
      bind_text(init, 2, std::to_string(kSchemaVersion));
      ok = sqlite3_step(init) == SQLITE_DONE;
    }
    const common::Error failure = journal->error("write meta");  // before finalize resets it
    sqlite3_finalize(init);
    if (!ok) return std::unexpected(failure);
  } else if (found_domain != domain) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("journal {} belongs to domain '{}', not '{}'", path, found_domain, domain));
  } else if (found_version != std::to_string(kSchemaVersion)) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("journal {} has schema version {}, this agent writes {}",
                                          path, found_version, kSchemaVersion));
  }
  const std::string insert_event =
      fmt::format("INSERT INTO events (at_unix_ns, id, from_state, to_state, reason, body) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, {})",
                  kWithoutSecrets);
  const std::pair<sqlite3_stmt**, const char*> statements[] = {
      {&journal->insert_event_, insert_event.c_str()},
      {&journal->upsert_reservation_,
       "INSERT OR REPLACE INTO reservations (id, body) VALUES (?, ?)"},
      {&journal->insert_request_,
       "INSERT OR REPLACE INTO requests (client_request_id, fingerprint, reservation_id, "
       "at_unix_ns) VALUES (?, ?, ?, ?)"},
      {&journal->set_next_key_, "UPDATE meta SET value = ? WHERE key = 'next_key'"},
  };
  for (const auto& [statement, sql] : statements) {
    if (sqlite3_prepare_v2(db, sql, -1, statement, nullptr) != SQLITE_OK) {
      return std::unexpected(journal->error("prepare"));
    }
  }
  return journal;
}

Journal::~Journal() {
  for (sqlite3_stmt* s : {insert_event_, upsert_reservation_, insert_request_, set_next_key_}) {
    sqlite3_finalize(s);
  }
  sqlite3_close(db_);
}

common::Result<Loaded> Journal::load() {
  Loaded loaded;
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE key = 'next_key'", -1, &s, nullptr) !=
      SQLITE_OK) {
    return std::unexpected(error("read meta"));
  }
  if (sqlite3_step(s) == SQLITE_ROW) loaded.next_key = std::stoull(column_text(s, 0));
  sqlite3_finalize(s);
  if (sqlite3_prepare_v2(db_, "SELECT body FROM reservations ORDER BY rowid", -1, &s, nullptr) !=
      SQLITE_OK) {
    return std::unexpected(error("read reservations"));
  }
  while (sqlite3_step(s) == SQLITE_ROW) loaded.reservations.push_back(column_text(s, 0));
  sqlite3_finalize(s);
  if (sqlite3_prepare_v2(db_, "SELECT client_request_id, fingerprint, reservation_id FROM requests",
                         -1, &s, nullptr) != SQLITE_OK) {
    return std::unexpected(error("read requests"));
  }
  while (sqlite3_step(s) == SQLITE_ROW) {
    loaded.requests.push_back({column_text(s, 0), column_text(s, 1), column_text(s, 2)});
  }
  sqlite3_finalize(s);
  if (sqlite3_prepare_v2(db_, "SELECT body FROM pools ORDER BY name", -1, &s, nullptr) !=
      SQLITE_OK) {
    return std::unexpected(error("read pools"));
  }
  while (sqlite3_step(s) == SQLITE_ROW) loaded.pools.push_back(column_text(s, 0));
  sqlite3_finalize(s);
  if (sqlite3_prepare_v2(db_, "SELECT count(*) FROM events", -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    loaded.events = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  return loaded;
}

common::Result<void> Journal::record(const Event& event, uint64_t next_key,
                                     const RequestRecord* request) {
  if (auto ok = exec("BEGIN IMMEDIATE"); !ok) return ok;
  auto step = [&](sqlite3_stmt* statement) {
    const int rc = sqlite3_step(statement);
    sqlite3_reset(statement);
    sqlite3_clear_bindings(statement);
    return rc == SQLITE_DONE;
  };
  bool ok = true;
  sqlite3_bind_int64(insert_event_, 1, event.at_ns);
  bind_text(insert_event_, 2, event.id);
  bind_text(insert_event_, 3, event.from);
  bind_text(insert_event_, 4, event.to);
  bind_text(insert_event_, 5, event.reason);
  bind_text(insert_event_, 6, event.body);
  ok = ok && step(insert_event_);
  if (ok) {
    bind_text(upsert_reservation_, 1, event.id);
    bind_text(upsert_reservation_, 2, event.body);
    ok = step(upsert_reservation_);
  }
  if (ok && request != nullptr) {
    bind_text(insert_request_, 1, request->client_request_id);
    bind_text(insert_request_, 2, request->fingerprint);
    bind_text(insert_request_, 3, request->reservation_id);
    sqlite3_bind_int64(insert_request_, 4, event.at_ns);
    ok = step(insert_request_);
  }
  if (ok) {
    bind_text(set_next_key_, 1, std::to_string(next_key));
    ok = step(set_next_key_);
  }
  return finish(ok, ok ? common::Error{} : error("write transition of " + event.id));
}

common::Result<void> Journal::finish(bool written, const common::Error& failure) {
  if (!written) {
    (void)exec("ROLLBACK");
    return std::unexpected(failure);
  }
  if (auto committed = exec("COMMIT"); !committed) {
    (void)exec("ROLLBACK");
    return committed;
  }
  ++commits_;
  return {};
}

common::Result<void> Journal::scrub_event_secrets() {
  // Once per journal: every event written since has had its secrets removed on insert, and the
  // check reads every event (a second per 100,000 reservations at startup).
  sqlite3_stmt* s = nullptr;
  bool done = false;
  if (sqlite3_prepare_v2(db_, "SELECT 1 FROM meta WHERE key = 'events_scrubbed'", -1, &s,
                         nullptr) == SQLITE_OK) {
    done = sqlite3_step(s) == SQLITE_ROW;
  }
  sqlite3_finalize(s);
  if (done) return {};
  auto mark = [this] {
    return exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('events_scrubbed', '1')");
  };
  if (sqlite3_prepare_v2(db_,
                         "SELECT count(*) FROM events WHERE json_valid(body) AND "
                         "json_extract(body, '$.tunnel_keys.keys[0].secret') IS NOT NULL",
                         -1, &s, nullptr) != SQLITE_OK) {
    return std::unexpected(error("read events"));
  }
  const int64_t with_secrets = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  sqlite3_finalize(s);
  if (with_secrets == 0) return mark();
  // kWithoutSecrets with the row's own body where the insert has its parameter ?6.
  std::string expression = kWithoutSecrets;
  for (size_t at = expression.find("?6"); at != std::string::npos; at = expression.find("?6", at)) {
    expression.replace(at, 2, "body");
  }
  const std::string sql = fmt::format("UPDATE events SET body = {};", expression);
  if (auto ok = exec(sql.c_str()); !ok) return ok;
  if (auto ok = exec("VACUUM;"); !ok) return ok;
  if (auto ok = erase_freed(); !ok) return ok;
  return mark();
}

common::Result<void> Journal::erase_freed() {
  // TRUNCATE: every frame is copied into the database and the WAL file is cut to 0 bytes, so
  // the earlier versions of a page (with a key since replaced) are gone from it too.
  int log_frames = 0, checkpointed = 0;
  const int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &log_frames,
                                           &checkpointed);
  if (rc != SQLITE_OK) return std::unexpected(error("checkpoint (erase old keys from the WAL)"));
  return {};
}

common::Result<void> Journal::for_each_event(const std::function<void(const Event&)>& f) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(
          db_,
          "SELECT seq, at_unix_ns, id, from_state, to_state, reason, body FROM events "
          "ORDER BY seq",
          -1, &s, nullptr) != SQLITE_OK) {
    return std::unexpected(error("read events"));
  }
  while (sqlite3_step(s) == SQLITE_ROW) {
    f(Event{sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), column_text(s, 2),
            column_text(s, 3), column_text(s, 4), column_text(s, 5), column_text(s, 6)});
  }
  sqlite3_finalize(s);
  return {};
}

common::Result<void> Journal::put_pool(const std::string& name, const std::string* body) {
  sqlite3_stmt* s = nullptr;
  const char* sql = body != nullptr ? "INSERT OR REPLACE INTO pools (name, body) VALUES (?1, ?2)"
                                    : "DELETE FROM pools WHERE name = ?1";
  if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) {
    return std::unexpected(error("prepare pool write"));
  }
  bind_text(s, 1, name);
  if (body != nullptr) bind_text(s, 2, *body);
  const int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) return std::unexpected(error("write pool " + name));
  ++commits_;
  return {};
}

common::Result<void> Journal::put_federation(const std::string& kind, const std::string& id,
                                             const std::string& body, int64_t at_ns,
                                             uint64_t next_key) {
  if (auto ok = exec("BEGIN IMMEDIATE"); !ok) return ok;
  sqlite3_stmt* s = nullptr;
  bool ok = sqlite3_prepare_v2(db_,
                               "INSERT OR REPLACE INTO federation (kind, id, body, at_unix_ns) "
                               "VALUES (?1, ?2, ?3, ?4)",
                               -1, &s, nullptr) == SQLITE_OK;
  if (ok) {
    bind_text(s, 1, kind);
    bind_text(s, 2, id);
    bind_text(s, 3, body);
    sqlite3_bind_int64(s, 4, at_ns);
    ok = sqlite3_step(s) == SQLITE_DONE;
  }
  sqlite3_finalize(s);
  if (ok && next_key > 0) {
    sqlite3_reset(set_next_key_);
    bind_text(set_next_key_, 1, std::to_string(next_key));
    ok = sqlite3_step(set_next_key_) == SQLITE_DONE;
    sqlite3_reset(set_next_key_);
    sqlite3_clear_bindings(set_next_key_);
  }
  if (!ok) {
    const common::Error e = error("write federation " + kind + " " + id);
    (void)exec("ROLLBACK");
    return std::unexpected(e);
  }
  if (auto done = exec("COMMIT"); !done) return done;
  ++commits_;
  return {};
}

common::Result<std::vector<std::pair<std::string, std::string>>> Journal::federation_rows(
    const std::string& kind) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT id, body FROM federation WHERE kind = ?1 ORDER BY rowid",
                         -1, &s, nullptr) != SQLITE_OK) {
    return std::unexpected(error("read federation " + kind));
  }
  bind_text(s, 1, kind);
  std::vector<std::pair<std::string, std::string>> rows;
  while (sqlite3_step(s) == SQLITE_ROW) rows.emplace_back(column_text(s, 0), column_text(s, 1));
  sqlite3_finalize(s);
  return rows;
}

common::Result<void> Journal::import_snapshot(const Snapshot& snapshot) {
  sqlite3_stmt* s = nullptr;
  int64_t existing = 0;
  if (sqlite3_prepare_v2(db_, "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM "
                         "reservations)", -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    existing = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  if (existing > 0) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("journal {} is not empty ({} rows of events and "
                                          "reservations): migrate into a new journal",
                                          path_, existing));
  }
  if (auto ok = exec("BEGIN IMMEDIATE"); !ok) return ok;
  bool ok = true;
  auto run = [&](const char* sql, std::initializer_list<std::string_view> texts) {
    if (!ok) return;
    ok = sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) == SQLITE_OK;
    int index = 1;
    for (std::string_view text : texts) {
      if (ok) ok = sqlite3_bind_text(s, index++, text.data(), static_cast<int>(text.size()),
                                     SQLITE_TRANSIENT) == SQLITE_OK;
    }
    if (ok) ok = sqlite3_step(s) == SQLITE_DONE;
    sqlite3_finalize(s);
  };
  const std::string insert_event =
      fmt::format("INSERT INTO events (at_unix_ns, id, from_state, to_state, reason, body) "
                  "VALUES (CAST(?1 AS INTEGER), ?2, ?3, ?4, ?5, {})",
                  kWithoutSecrets);
  for (const Event& e : snapshot.events) {
    const std::string at = std::to_string(e.at_ns);
    run(insert_event.c_str(), {at, e.id, e.from, e.to, e.reason, e.body});
  }
  for (const std::string& body : snapshot.state.reservations) {
    run("INSERT OR REPLACE INTO reservations (id, body) VALUES (json_extract(?1, '$.id'), ?1)",
        {body});
  }
  for (const ArchivedRow& row : snapshot.archived) {
    const std::string key = std::to_string(row.key);
    const std::string at = std::to_string(row.at_ns);
    run("INSERT OR REPLACE INTO archive (key, id, body, at_unix_ns) VALUES (CAST(?1 AS INTEGER), "
        "?2, ?3, CAST(?4 AS INTEGER))",
        {key, row.id, row.body, at});
  }
  for (const RequestRecord& r : snapshot.state.requests) {
    run("INSERT OR REPLACE INTO requests (client_request_id, fingerprint, reservation_id, "
        "at_unix_ns) VALUES (?1, ?2, ?3, 0)",
        {r.client_request_id, r.fingerprint, r.reservation_id});
  }
  for (const std::string& body : snapshot.state.pools) {
    run("INSERT OR REPLACE INTO pools (name, body) VALUES (json_extract(?1, '$.name'), ?1)",
        {body});
  }
  for (const FederationRow& row : snapshot.federation) {
    run("INSERT OR REPLACE INTO federation (kind, id, body, at_unix_ns) VALUES (?1, ?2, ?3, 0)",
        {row.kind, row.id, row.body});
  }
  const std::string next_key = std::to_string(snapshot.state.next_key);
  run("UPDATE meta SET value = ?1 WHERE key = 'next_key'", {next_key});
  if (!ok) {
    const common::Error e = error("import");
    (void)exec("ROLLBACK");
    return std::unexpected(e);
  }
  if (auto done = exec("COMMIT"); !done) return done;
  ++commits_;
  return {};
}

}  // namespace detwan::control::journal
