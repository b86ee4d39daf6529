#pragma once
// A follower's warm copy of the rows a leader's load reads (docs/control.md, "Failover at
// scale"): the values under reservations/, requests/ and pools/ of one domain, opened with the
// store key, each with the mod revision etcd wrote it at.
//
// Why: an elected replica must read the whole state before it serves, and a load of 100,000
// reservations from etcd is ~400 MB of JSON (8.9 s on the benchmark machine): leadership would
// be back within one lease but writes would wait for the load. A follower instead keeps this
// copy and brings it up to date every second or so; sync() asks each section's count and the
// keys written since its last sync (etcd filters by mod revision as it scans: only those cross
// the wire) and reads those values (batches of 100 keys, one transaction each). When the count
// says a key was deleted, it lists the section's keys alone (keys and revisions, no values: ~40
// bytes a row), reads the values that are new or whose mod revision moved (the whole section page
// by page when more than half did, as on the first sync) and drops the keys gone. The elected
// replica's load is then one such sync plus take(): what changed since the last sync, not the
// whole state.
//
// Consistency: every value is stored with the mod revision it was read with, so a row is never
// paired with another write's revision; a sync that overlaps the leader's writes may miss the
// newest ones, which the next sync reads. The load that matters runs after this replica won the
// election, when the fence stops every other writer (etcd_store.h): its sync sees the final
// state. Trust: a value that does not open under the store key fails the sync naming its key
// (and so the load that asked for it).
//
// Memory: the opened rows (~3 kB per reservation); take() moves them out to the load, so a
// leader does not keep a second copy (the copy refills, in full, once it follows again).
// Threading: thread-safe (one mutex; sync and take hold it while they work).
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/store/etcd_client.h"

namespace detwan::control::store {

// The sections a load reads, in this order.
inline constexpr const char* kWarmSections[] = {"reservations/", "requests/", "pools/"};

struct WarmRow {
  int64_t mod_revision = 0;
  std::string value;  // opened
};
// Per section (kWarmSections), its rows by full key, in key order.
using WarmSections = std::map<std::string, std::map<std::string, WarmRow>>;

struct WarmSyncCounts {
  uint64_t listed = 0;   // keys in the sections now
  uint64_t read = 0;     // values read by this sync (new or changed)
  uint64_t dropped = 0;  // keys gone since the last sync
  bool full = false;     // a section was read whole (first sync, or most of it changed)
  uint64_t listings = 0; // sections listed key by key (a key was deleted, or a first sync)
};

class WarmRows {
 public:
  // prefix: the domain's ("/detwan/<domain>/"); store_key: kStoreKeyBytes bytes.
  WarmRows(std::shared_ptr<EtcdClient> client, std::string prefix, std::string store_key,
           int64_t page_keys);

  // Brings the copy up to date (see the header comment). On an error the copy may lack rows
  // (never holds a wrong one); the next sync reads them.
  [[nodiscard]] common::Result<WarmSyncCounts> sync();
  // Moves every row out (the copy is empty afterwards).
  [[nodiscard]] WarmSections take();
  [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }
  // Rows held after the last sync or take (never waits for a sync in progress).
  [[nodiscard]] uint64_t rows() const noexcept { return rows_.load(); }
  [[nodiscard]] uint64_t syncs() const noexcept { return syncs_.load(); }

 private:
  common::Result<void> sync_section(const std::string& section, WarmSyncCounts& counts);
  // The cheap way, when no key was deleted since the last sync: the section's count and the
  // keys written since (etcd filters them as it scans; nothing else crosses the wire). false:
  // a key was deleted (or never synced), the whole listing is needed.
  common::Result<bool> sync_changes(const std::string& section, WarmSyncCounts& counts);
  common::Result<void> read_whole(const std::string& section, std::map<std::string, WarmRow>& into,
                                  WarmSyncCounts& counts);
  // Opens a value read from etcd into `into` (kInternal naming the key if it does not open).
  common::Result<void> keep(KeyValue& kv, std::map<std::string, WarmRow>& into,
                            WarmSyncCounts& counts) const;
  common::Result<void> read_keys(const std::vector<std::string>& keys,
                                 std::map<std::string, WarmRow>& into, WarmSyncCounts& counts);

  std::shared_ptr<EtcdClient> client_;
  const std::string prefix_;
  const std::string store_key_;
  const int64_t page_keys_;
  mutable std::mutex mutex_;
  WarmSections sections_;
  std::map<std::string, int64_t> synced_at_;  // per section: the revision its rows are as of
  std::atomic<uint64_t> rows_{0};
  std::atomic<uint64_t> syncs_{0};
};

}  // namespace detwan::control::store
