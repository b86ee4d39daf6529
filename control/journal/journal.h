#pragma once
// The agent's journal: an embedded SQLite database in WAL mode (docs/control.md, "Journal").
//
// Tables:
//   meta(key, value)                   schema version, domain, next reservation key
//   reservations(id, body)             the current JSON of every reservation
//   events(seq, at_unix_ns, id, from_state, to_state, reason, body)
//                                      one row per transition, with the reservation after it
//                                      without its key secrets (fingerprints only)
//   requests(client_request_id, fingerprint, reservation_id, at_unix_ns)
//                                      idempotency: a repeated request finds its reservation
//   pools(name, body)                  registered compute pools (control/compute/pool.h)
//   archive(key, id, body, at_unix_ns) reservations final for agent.archive_after, moved out
//                                      of `reservations` (bodies without key secrets)
//   federation(kind, id, body, at_unix_ns)
//                                      federated reservations this agent aggregates (kind
//                                      "aggregate") and the federation data of segments it
//                                      holds for others (kind "segment"), docs/federation.md
// record() writes one transition (event + current body + optional request row + next key) in
// one transaction: after it returns, a kill -9 of the agent loses nothing it reported. With
// sync "normal" (the default) a power loss may lose the last transactions; "full" fsyncs each.
//
// Keys (docs/control.md, "Journal"): a tunnel key secret is only ever in the `reservations` row
// of its reservation, so the journal holds a reservation's current key and, during a rotation,
// the previous one. secure_delete zeroes what a write frees; erase_freed() (called by the agent
// when a rotation completes) empties the WAL, whose frames hold earlier page versions. The file
// is created 0600 on its descriptor; a journal of another uid is refused.
//
// Threading: one owner (the agent's core, under its lock). Errors name the file and the
// SQLite message.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/journal/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace detwan::control::journal {

class Journal final : public Store {
 public:
  static common::Result<std::unique_ptr<Journal>> open(const std::string& path, bool sync_full,
                                                       const std::string& domain);
  ~Journal() override;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  [[nodiscard]] common::Result<Loaded> load() override;
  // One transition, atomically. `request` (may be null) is stored for idempotency.
  [[nodiscard]] common::Result<void> record(const Event& event, uint64_t next_key,
                                            const RequestRecord* request) override;
  // Registers (body) or removes (nullptr) a compute pool; one statement, committed on return.
  [[nodiscard]] common::Result<void> put_pool(const std::string& name, const std::string* body) override;
  // Writes (replaces) one federation row and, when next_key > 0, the next reservation key, in
  // one transaction: committed on return.
  [[nodiscard]] common::Result<void> put_federation(const std::string& kind, const std::string& id,
                                                    const std::string& body, int64_t at_ns,
                                                    uint64_t next_key) override;
  // Every row of `kind` as (id, body), in insertion order.
  [[nodiscard]] common::Result<std::vector<std::pair<std::string, std::string>>> federation_rows(
      const std::string& kind) override;
  // Checkpoints and truncates the WAL: nothing a past transaction replaced (an old key) is left
  // in the journal's files. Fails (kIo) while another connection reads (retry later).
  [[nodiscard]] common::Result<void> erase_freed() override;
  // Every event in order (journal check, tests).
  [[nodiscard]] common::Result<void> for_each_event(
      const std::function<void(const Event&)>& f) override;
  [[nodiscard]] common::Result<void> archive(const std::vector<ArchivedRow>& rows) override;
  [[nodiscard]] common::Result<std::optional<ArchivedRow>> find_archived(uint64_t key) override;
  [[nodiscard]] common::Result<std::vector<ArchivedRow>> archived_after(uint64_t after_key,
                                                                        size_t limit) override;
  [[nodiscard]] common::Result<void> import_snapshot(const Snapshot& snapshot) override;
  [[nodiscard]] const std::string& path() const noexcept override { return path_; }
  [[nodiscard]] uint64_t commits() const noexcept override { return commits_; }

 private:
  Journal(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  common::Result<void> exec(const char* sql);
  // Ends the transaction BEGIN IMMEDIATE opened: COMMIT when everything in it was written (then
  // one commit more), else ROLLBACK and `failure`.
  common::Result<void> finish(bool written, const common::Error& failure);
  common::Result<void> scrub_event_secrets();
  common::Error error(const std::string& what) const;

  std::string path_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_event_ = nullptr;
  sqlite3_stmt* upsert_reservation_ = nullptr;
  sqlite3_stmt* insert_request_ = nullptr;
  sqlite3_stmt* set_next_key_ = nullptr;
  uint64_t commits_ = 0;
};

}  // namespace detwan::control::journal
