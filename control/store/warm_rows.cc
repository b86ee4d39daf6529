#include "control/store/warm_rows.h"

#include <utility>

#include "control/store/sealed_value.h"

namespace detwan::control::store {
namespace {

constexpr size_t kKeysPerTxn = 100;  // etcd refuses more than 128 operations (--max-txn-ops)
// A listing moves ~40 bytes of JSON per key (no values): pages this many times larger than a
// load's, since etcd counts the rest of the range on every call.
constexpr int64_t kListingPageFactor = 4;

}  // namespace

WarmRows::WarmRows(std::shared_ptr<EtcdClient> client, std::string prefix, std::string store_key,
                   int64_t page_keys)
    : client_(std::move(client)),
      prefix_(std::move(prefix)),
      store_key_(std::move(store_key)),
      page_keys_(page_keys > 0 ? page_keys : 1) {}

common::Result<WarmSyncCounts> WarmRows::sync() {
  std::lock_guard lock(mutex_);
  WarmSyncCounts counts;
  common::Result<void> ok;
  for (const char* section : kWarmSections) {
    ok = sync_section(section, counts);
    if (!ok) break;
  }
  uint64_t n = 0;
  for (const auto& [section, rows] : sections_) n += rows.size();
  rows_.store(n);
  if (!ok) return std::unexpected(ok.error());
  syncs_.fetch_add(1);
  return counts;
}

WarmSections WarmRows::take() {
  std::lock_guard lock(mutex_);
  WarmSections out = std::move(sections_);
  sections_.clear();
  synced_at_.clear();
  rows_.store(0);
  return out;
}

common::Result<bool> WarmRows::sync_changes(const std::string& section, WarmSyncCounts& counts) {
  std::map<std::string, WarmRow>& copy = sections_[section];
  const int64_t since = synced_at_[section];
  if (since == 0) return false;
  const std::string from = prefix_ + section;
  const std::string end = prefix_end(from);
  // The count now, then -- at that same revision -- the keys written since the last sync.
  auto counted = client_->range(EtcdClient::RangeQuery{from, end, 0, false, true});
  if (!counted) return std::unexpected(counted.error());
  auto changed = client_->range(
      EtcdClient::RangeQuery{from, end, 0, true, false, counted->revision, since + 1});
  if (!changed) return std::unexpected(changed.error());
  std::vector<std::string> wanted;
  uint64_t added = 0;
  for (KeyValue& kv : changed->kvs) {
    auto at = copy.find(kv.key);
    if (at == copy.end()) ++added;
    if (at == copy.end() || at->second.mod_revision != kv.mod_revision) {
      wanted.push_back(std::move(kv.key));
    }
  }
  // A key deleted since shows only in the count: then the whole listing finds which.
  if (static_cast<uint64_t>(counted->count) != copy.size() + added) return false;
  if (auto ok = read_keys(wanted, copy, counts); !ok) return std::unexpected(ok.error());
  counts.listed += static_cast<uint64_t>(counted->count);
  synced_at_[section] = counted->revision;
  return true;
}

common::Result<void> WarmRows::sync_section(const std::string& section, WarmSyncCounts& counts) {
  auto incremental = sync_changes(section, counts);
  if (!incremental) return std::unexpected(incremental.error());
  if (*incremental) return {};
  std::map<std::string, WarmRow>& copy = sections_[section];
  int64_t listed_at = 0;  // the first page's revision: anything written after it is newer
  ++counts.listings;
  // The keys there now with their mod revisions; a row still at its revision moves over as is.
  std::map<std::string, WarmRow> next;
  std::vector<std::string> wanted;
  uint64_t listed = 0;
  uint64_t changed = 0;  // listed, held, at another revision
  const std::string from = prefix_ + section;
  EtcdClient::RangeQuery listing{from, prefix_end(from), page_keys_ * kListingPageFactor, true};
  auto ok = for_each_page(*client_, listing, [&](RangeResult& page) -> common::Result<void> {
    if (listed_at == 0) listed_at = page.revision;
    for (KeyValue& kv : page.kvs) {
      ++listed;
      auto at = copy.find(kv.key);
      if (at != copy.end() && at->second.mod_revision == kv.mod_revision) {
        next.insert(copy.extract(at));
      } else {
        if (at != copy.end()) ++changed;
        wanted.push_back(std::move(kv.key));
      }
    }
    return {};
  });
  if (!ok) return ok;
  counts.listed += listed;
  counts.dropped += copy.size() - changed;  // the rest of what is left was not listed: gone
  copy = std::move(next);
  ok = wanted.size() > kKeysPerTxn && 2 * wanted.size() > listed
           ? read_whole(section, copy, counts)
           : read_keys(wanted, copy, counts);
  if (ok) synced_at_[section] = listed_at;
  return ok;
}

common::Result<void> WarmRows::keep(KeyValue& kv, std::map<std::string, WarmRow>& into,
                                    WarmSyncCounts& counts) const {
  auto opened = open_sealed(store_key_, kv.key, kv.value);
  if (!opened) return std::unexpected(opened.error());
  into.insert_or_assign(std::move(kv.key), WarmRow{kv.mod_revision, std::move(*opened)});
  ++counts.read;
  return {};
}

common::Result<void> WarmRows::read_whole(const std::string& section,
                                          std::map<std::string, WarmRow>& into,
                                          WarmSyncCounts& counts) {
  counts.full = true;
  into.clear();
  const std::string from = prefix_ + section;
  return for_each_page(*client_, EtcdClient::RangeQuery{from, prefix_end(from), page_keys_},
                       [&](RangeResult& page) -> common::Result<void> {
                         for (KeyValue& kv : page.kvs) {
                           if (auto ok = keep(kv, into, counts); !ok) return ok;
                         }
                         return {};
                       });
}

common::Result<void> WarmRows::read_keys(const std::vector<std::string>& keys,
                                         std::map<std::string, WarmRow>& into,
                                         WarmSyncCounts& counts) {
  for (size_t first = 0; first < keys.size(); first += kKeysPerTxn) {
    std::vector<Operation> reads;
    for (size_t i = first; i < keys.size() && i < first + kKeysPerTxn; ++i) {
      reads.push_back(Operation{Operation::Kind::kRange, keys[i], "", "", 0, 0});
    }
    auto done = client_->txn({}, reads);
    if (!done) return std::unexpected(done.error());
    for (std::vector<KeyValue>& found : done->ranges) {
      // Empty: deleted since the listing (the next sync does not list it).
      for (KeyValue& kv : found) {
        if (auto ok = keep(kv, into, counts); !ok) return ok;
      }
    }
  }
  return {};
}

}  // namespace detwan::control::store
