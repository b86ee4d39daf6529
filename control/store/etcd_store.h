#pragma once
// The agent's state in etcd (docs/control.md, "The agent on etcd"): journal::Store over
// EtcdClient, for replicated agents of which one, the leader, writes.
//
// Keys, under the prefix /detwan/<domain>/:
//   meta/domain, meta/next_key, meta/event_seq   the domain's name, the next reservation key and
//                                                the next event's sequence number
//   reservations/<id>                            the current body (with its key secrets)
//   events/<seq, 20 digits>                      one transition (its body without key secrets)
//   requests/<client_request_id>                 idempotency
//   pools/<name>, federation/<kind>/<id>         as in the SQLite journal
//   archive/<key, 20 digits>                     an archived reservation (body without secrets)
//   leader                                       the elected replica (leader_election.h)
// Every value but the leader's is sealed with AES-256-GCM under the store key (32 bytes, the
// same file on every replica, --store-key), the value's own key name as associated data: etcd's
// members, backups and snapshots hold no tunnel secret and no reservation in clear, and a
// value moved to another key does not open.
//
// Fencing: a store opened with a fence (the leader key and the create revision this replica's
// election wrote it at) makes every write one etcd transaction that also compares the leader
// key's create revision: once the lease is lost (expired, or another replica elected), no write
// of this replica can commit, so two replicas can never both book. Such a write fails with
// kUnavailable ("no longer the leader"). Each event key is also compared absent (never
// overwritten). Reads are plain ranges, paged (options.page_keys per call).
//
// Threading: one owner at a time (the agent's core), as journal::Store says.
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/journal/store.h"
#include "control/store/etcd_client.h"
#include "control/store/warm_rows.h"

namespace detwan::control::store {

inline constexpr size_t kStoreKeyBytes = 32;
// Keys per range call of a load. etcd 3.4 counts the whole rest of the range on every call, so
// small pages cost it more (101,000 values: 5.65 s in pages of 500, 3.8 s of 5,000); a page of
// 5,000 bodies is ~20 MB of JSON.
inline constexpr int64_t kPageKeys = 5000;

struct Fence {
  std::string leader_key;      // "/detwan/<domain>/leader"
  int64_t create_revision = 0;  // 0: no fence (migrate, journal-check, tests)
};

struct EtcdStoreOptions {
  std::string domain;
  std::string store_key;  // kStoreKeyBytes bytes
  Fence fence;
  int64_t page_keys = kPageKeys;  // keys per range call of a load (tests page with fewer)
  // A follower's warm copy of this domain (warm_rows.h): load() syncs it and takes its rows
  // instead of reading every value again. nullptr: load() reads everything.
  std::shared_ptr<WarmRows> warm = nullptr;
};

// The key prefix of a domain: "/detwan/<domain>/".
std::string domain_prefix(const std::string& domain);

// "etcd://h1:p1,h2:p2" -> {"http://h1:p1", "http://h2:p2"}; kConfig naming what is wrong.
common::Result<std::vector<std::string>> parse_etcd_url(const std::string& url);

// The store key from its file (read_secret_file: owner-only; 32 raw bytes or 64 hex digits).
common::Result<std::string> read_store_key(const std::string& path);

class EtcdStore final : public journal::Store {
 public:
  // Checks (or, in an empty prefix, writes) meta/domain. Contacts etcd.
  static common::Result<std::unique_ptr<EtcdStore>> open(std::shared_ptr<EtcdClient> client,
                                                          EtcdStoreOptions options,
                                                          std::string description);
  ~EtcdStore() override;

  // With options.warm: what changed since its last sync, then its rows (warm_rows.h).
  [[nodiscard]] common::Result<journal::Loaded> load() override;
  [[nodiscard]] common::Result<void> record(const journal::Event& event, uint64_t next_key,
                                            const journal::RequestRecord* request) override;
  [[nodiscard]] common::Result<void> put_pool(const std::string& name,
                                              const std::string* body) override;
  [[nodiscard]] common::Result<void> put_federation(const std::string& kind, const std::string& id,
                                                    const std::string& body, int64_t at_ns,
                                                    uint64_t next_key) override;
  [[nodiscard]] common::Result<std::vector<std::pair<std::string, std::string>>> federation_rows(
      const std::string& kind) override;
  [[nodiscard]] common::Result<void> erase_freed() override;
  [[nodiscard]] common::Result<void> for_each_event(
      const std::function<void(const journal::Event&)>& f) override;
  [[nodiscard]] common::Result<void> archive(
      const std::vector<journal::ArchivedRow>& rows) override;
  [[nodiscard]] common::Result<std::optional<journal::ArchivedRow>> find_archived(
      uint64_t key) override;
  [[nodiscard]] common::Result<std::vector<journal::ArchivedRow>> archived_after(
      uint64_t after_key, size_t limit) override;
  [[nodiscard]] common::Result<void> import_snapshot(const journal::Snapshot& snapshot) override;
  [[nodiscard]] const std::string& path() const noexcept override { return description_; }
  [[nodiscard]] uint64_t commits() const noexcept override { return commits_.load(); }
  // A write failed in a way that may have committed it (etcd stopped answering mid-call): this
  // store writes nothing more until load() reads the state again; the replica should step down
  // so that a leader with the true state serves (clients retry with their request ids).
  [[nodiscard]] bool uncertain() const noexcept { return uncertain_.load(); }
  // What the last load() read through the warm copy (nullopt: it read everything).
  [[nodiscard]] const std::optional<WarmSyncCounts>& warm_sync() const noexcept {
    return warm_counts_;
  }

 private:
  EtcdStore(std::shared_ptr<EtcdClient> client, EtcdStoreOptions options, std::string description);
  // Every (key, opened value) under prefix_ + `section`, in key order, page by page.
  common::Result<void> scan(const std::string& section,
                            const std::function<common::Result<void>(const KeyValue&,
                                                                     std::string&&)>& f);
  common::Result<std::string> seal(const std::string& key, const std::string& plain) const;
  common::Result<std::string> open_value(const KeyValue& kv) const;
  Operation put(const std::string& key, const std::string& sealed) const;
  // One fenced transaction of puts/deletes; kUnavailable when the fence no longer holds.
  common::Result<void> write(std::vector<Compare> compares, const std::vector<Operation>& ops,
                             const std::string& what);
  common::Result<uint64_t> read_number(const std::string& key, uint64_t absent);
  // archive/<key, 20 digits> and its value (etcd_store_archive.cc).
  static std::string archive_key(uint64_t key);
  static std::string archive_value(const journal::ArchivedRow& row);

  std::shared_ptr<EtcdClient> client_;
  EtcdStoreOptions options_;
  std::string description_;
  std::string prefix_;
  int64_t next_seq_ = 1;  // known after load()
  bool loaded_ = false;
  std::optional<WarmSyncCounts> warm_counts_;  // what the last load's sync read
  std::atomic<bool> uncertain_{false};
  std::atomic<uint64_t> commits_{0};
};

}  // namespace detwan::control::store
