#pragma once
// Where the agent keeps its state (docs/control.md, "Journal" and "The agent on etcd"): the
// interface both stores implement.
//   journal::Journal   SQLite, one agent (the default: `--store sqlite:PATH` or agent.journal)
//   store::EtcdStore   etcd, several replicas of which one, the leader, writes
//                      (`--store etcd://HOST:PORT,...`)
// Every write is one atomic transaction, committed (durable as the store defines it) when the
// call returns: a kill -9 of the agent afterwards loses nothing it reported. A write that fails
// changed nothing. Errors: kUnavailable (the store cannot be reached, or this replica is no
// longer the leader: the caller answers 503 and a client retries, here or at another replica),
// kIo / kInternal (the store itself failed), kConfig (a store of another domain or schema).
//
// Threading: one owner at a time (the agent's core, under its lock).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace detwan::control::journal {

struct Event {
  int64_t seq = 0;
  int64_t at_ns = 0;
  std::string id;
  std::string from;
  std::string to;
  std::string reason;
  std::string body;  // the reservation's JSON after the transition
};

struct RequestRecord {
  std::string client_request_id;
  std::string fingerprint;
  std::string reservation_id;
};

struct Loaded {
  uint64_t next_key = 1;
  std::vector<std::string> reservations;  // JSON bodies
  std::vector<RequestRecord> requests;
  std::vector<std::string> pools;  // JSON bodies
  int64_t events = 0;
};

// One row of the federation table: (kind, id, body).
struct FederationRow {
  std::string kind;
  std::string id;
  std::string body;
};

// A reservation moved out of the hot state (docs/control.md, "Archive"): final for a while, no
// longer loaded at startup, still answered by id. Its body has no key secrets.
struct ArchivedRow {
  uint64_t key = 0;  // the reservation's numeric key (its id is "r-<key>")
  std::string id;
  std::string body;
  int64_t at_ns = 0;  // when it was archived
};

// A whole store's content, for `detwan-agent migrate`.
struct Snapshot {
  Loaded state;
  std::vector<ArchivedRow> archived;
  std::vector<Event> events;  // in order; bodies without key secrets
  std::vector<FederationRow> federation;
};

class Store {
 public:
  virtual ~Store() = default;

  [[nodiscard]] virtual common::Result<Loaded> load() = 0;
  // One transition, atomically: the event (its body written without key secrets), the
  // reservation's current body (with them), the idempotency row (`request`, may be null) and the
  // next reservation key.
  [[nodiscard]] virtual common::Result<void> record(const Event& event, uint64_t next_key,
                                                    const RequestRecord* request) = 0;
  // Registers (body) or removes (nullptr) a compute pool.
  [[nodiscard]] virtual common::Result<void> put_pool(const std::string& name,
                                                      const std::string* body) = 0;
  // Writes (replaces) one federation row and, when next_key > 0, the next reservation key.
  [[nodiscard]] virtual common::Result<void> put_federation(const std::string& kind,
                                                            const std::string& id,
                                                            const std::string& body, int64_t at_ns,
                                                            uint64_t next_key) = 0;
  // Every row of `kind` as (id, body), in the order they were first written.
  [[nodiscard]] virtual common::Result<std::vector<std::pair<std::string, std::string>>>
  federation_rows(const std::string& kind) = 0;
  // Removes what earlier writes replaced (an old tunnel key) from the store's files or history.
  [[nodiscard]] virtual common::Result<void> erase_freed() = 0;
  // Every event in order (journal check, migrate, tests).
  [[nodiscard]] virtual common::Result<void> for_each_event(
      const std::function<void(const Event&)>& f) = 0;
  // Moves these (final) reservations out of what load() returns into the archive: their rows as
  // given (bodies without key secrets); each row's move is atomic (SQLite: all in one
  // transaction; etcd: 50 rows per transaction). Their events stay.
  [[nodiscard]] virtual common::Result<void> archive(const std::vector<ArchivedRow>& rows) = 0;
  // One archived reservation, or nullopt when `key` is not archived.
  [[nodiscard]] virtual common::Result<std::optional<ArchivedRow>> find_archived(uint64_t key) = 0;
  // Archived reservations with keys above `after_key`, in key order, at most `limit`.
  [[nodiscard]] virtual common::Result<std::vector<ArchivedRow>> archived_after(uint64_t after_key,
                                                                                size_t limit) = 0;
  // Writes a whole snapshot into this store, which must hold no reservation and no event yet
  // (kConfig otherwise): `detwan-agent migrate`.
  [[nodiscard]] virtual common::Result<void> import_snapshot(const Snapshot& snapshot) = 0;
  // What the store is, for logs and /healthz: a file path, or "etcd://HOST:PORT,.../detwan/D/".
  [[nodiscard]] virtual const std::string& path() const noexcept = 0;
  // Transactions committed by this process.
  [[nodiscard]] virtual uint64_t commits() const noexcept = 0;
};

// The whole content of `store` (migrate's source).
common::Result<Snapshot> snapshot_of(Store& store);

}  // namespace detwan::control::journal
