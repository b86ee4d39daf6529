// EtcdStore's archive (etcd_store.h): archive/<key> holds a reservation moved out of
// reservations/, sealed like every value; a row's move (its archive key written, its
// reservation key deleted) is one fenced transaction with others, kOpsPerTxn / 2 rows at a time.
#include <algorithm>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "control/store/etcd_store.h"

namespace detwan::control::store {
namespace {

constexpr size_t kRowsPerTxn = 50;  // two operations each (etcd refuses more than 128)

common::Result<journal::ArchivedRow> archived_row_of(const std::string& key,
                                                     const std::string& text) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(text, ec);
  const boost::json::object* o = ec ? nullptr : v.if_object();
  const boost::json::value* number = o != nullptr ? o->if_contains("key") : nullptr;
  const boost::json::value* id = o != nullptr ? o->if_contains("id") : nullptr;
  const boost::json::value* body = o != nullptr ? o->if_contains("body") : nullptr;
  const boost::json::value* at = o != nullptr ? o->if_contains("at_unix_ns") : nullptr;
  if (number == nullptr || (!number->is_uint64() && !number->is_int64()) || id == nullptr ||
      !id->is_string() || body == nullptr || !body->is_string() || at == nullptr ||
      !at->is_int64()) {
    return common::make_error(common::ErrorCode::kInternal,
                              fmt::format("{}: not an archived reservation", key));
  }
  return journal::ArchivedRow{number->to_number<uint64_t>(), std::string(id->as_string()),
                              std::string(body->as_string()), at->as_int64()};
}

}  // namespace

std::string EtcdStore::archive_key(uint64_t key) { return fmt::format("archive/{:020d}", key); }

std::string EtcdStore::archive_value(const journal::ArchivedRow& row) {
  return boost::json::serialize(boost::json::object{
      {"key", row.key}, {"id", row.id}, {"body", row.body}, {"at_unix_ns", row.at_ns}});
}

common::Result<void> EtcdStore::archive(const std::vector<journal::ArchivedRow>& rows) {
  std::vector<Operation> batch;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string key = prefix_ + archive_key(rows[i].key);
    auto sealed = seal(key, archive_value(rows[i]));
    if (!sealed) return std::unexpected(sealed.error());
    batch.push_back(put(key, *sealed));
    batch.push_back(Operation{Operation::Kind::kDelete, prefix_ + "reservations/" + rows[i].id,
                              "", "", 0, 0});
    if (batch.size() == 2 * kRowsPerTxn || i + 1 == rows.size()) {
      if (auto ok = write({}, batch, fmt::format("archive {} reservations", batch.size() / 2));
          !ok) {
        return ok;
      }
      batch.clear();
    }
  }
  return {};
}

common::Result<std::vector<journal::ArchivedRow>> EtcdStore::archived_after(uint64_t after_key,
                                                                            size_t limit) {
  std::vector<journal::ArchivedRow> rows;
  const std::string end = prefix_end(prefix_ + "archive/");
  std::string from = prefix_ + archive_key(after_key) + std::string(1, '\0');
  while (rows.size() < limit) {
    auto page = client_->range(
        from, end, std::min<int64_t>(static_cast<int64_t>(limit - rows.size()), options_.page_keys));
    if (!page) return std::unexpected(page.error());
    for (const KeyValue& kv : page->kvs) {
      auto text = open_value(kv);
      if (!text) return std::unexpected(text.error());
      auto row = archived_row_of(kv.key, *text);
      if (!row) return std::unexpected(row.error());
      rows.push_back(std::move(*row));
    }
    if (!page->more || page->kvs.empty()) break;
    from = page->kvs.back().key + std::string(1, '\0');
  }
  return rows;
}

common::Result<std::optional<journal::ArchivedRow>> EtcdStore::find_archived(uint64_t key) {
  auto found = client_->range(prefix_ + archive_key(key));
  if (!found) return std::unexpected(found.error());
  if (found->kvs.empty()) return std::nullopt;
  auto text = open_value(found->kvs.front());
  if (!text) return std::unexpected(text.error());
  auto row = archived_row_of(found->kvs.front().key, *text);
  if (!row) return std::unexpected(row.error());
  return std::optional<journal::ArchivedRow>(std::move(*row));
}

}  // namespace detwan::control::store
