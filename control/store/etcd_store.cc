#include "control/store/etcd_store.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/net_address.h"
#include "common/secret_file.h"
#include "common/split.h"
#include "control/store/sealed_value.h"

namespace detwan::control::store {
namespace {

namespace json = boost::json;
using common::ErrorCode;
using common::make_error;

constexpr size_t kOpsPerTxn = 100;  // etcd refuses more than 128 (--max-txn-ops)

std::string seq_key(int64_t seq) { return fmt::format("events/{:020d}", seq); }

// The event's body without key secrets (fingerprints stay), as the SQLite journal writes it.
std::string without_secrets(const std::string& body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return body;
  json::value* keys = v.as_object().if_contains("tunnel_keys");
  if (keys == nullptr || !keys->is_object()) return body;
  json::value* list = keys->as_object().if_contains("keys");
  if (list == nullptr || !list->is_array()) return body;
  for (json::value& k : list->as_array()) {
    if (k.is_object()) k.as_object().erase("secret");
  }
  return json::serialize(v);
}

common::Result<int64_t> number_in(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_int64()) {
    return make_error(ErrorCode::kInternal, fmt::format("an event without '{}'", key));
  }
  return v->as_int64();
}

std::string text_in(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

// The value of events/<seq>: the transition, its body without key secrets.
std::string event_value(int64_t seq, const journal::Event& e) {
  return json::serialize(json::object{{"seq", seq},
                                      {"at_unix_ns", e.at_ns},
                                      {"id", e.id},
                                      {"from", e.from},
                                      {"to", e.to},
                                      {"reason", e.reason},
                                      {"body", without_secrets(e.body)}});
}

// The value of requests/<client_request_id>.
std::string request_value(const journal::RequestRecord& r, int64_t at_ns) {
  return json::serialize(json::object{{"client_request_id", r.client_request_id},
                                      {"fingerprint", r.fingerprint},
                                      {"reservation_id", r.reservation_id},
                                      {"at_unix_ns", at_ns}});
}

// A text field of a JSON body ("" when the body is not an object or has no such text).
std::string field_of(const std::string& body, std::string_view key) {
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  return !ec && v.is_object() ? text_in(v.as_object(), key) : "";
}

}  // namespace

std::string domain_prefix(const std::string& domain) { return "/detwan/" + domain + "/"; }

common::Result<std::vector<std::string>> parse_etcd_url(const std::string& url) {
  constexpr std::string_view kScheme = "etcd://";
  if (!url.starts_with(kScheme)) {
    return make_error(
        ErrorCode::kConfig,
        fmt::format("store '{}': an etcd store is etcd://HOST:PORT[,HOST:PORT...]", url));
  }
  std::vector<std::string> endpoints;
  for (std::string_view member : common::split(std::string_view(url).substr(kScheme.size()), ',')) {
    auto endpoint = common::parse_endpoint(member);
    if (!endpoint) {
      return make_error(ErrorCode::kConfig,
                        fmt::format("store '{}': member '{}' is not HOST:PORT: {}", url, member,
                                    endpoint.error().message));
    }
    endpoints.push_back("http://" + common::join_host_port(endpoint->host, endpoint->port));
  }
  return endpoints;
}

common::Result<std::string> read_store_key(const std::string& path) {
  auto text = common::read_secret_file(path, "store key file", 256);
  if (!text) return std::unexpected(text.error());
  if (text->size() == kStoreKeyBytes) return *text;
  std::string hex = *text;
  while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r' || hex.back() == ' ')) {
    hex.pop_back();
  }
  if (hex.size() == 2 * kStoreKeyBytes &&
      hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
    std::string key;
    for (size_t i = 0; i < hex.size(); i += 2) {
      key.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    return key;
  }
  return make_error(ErrorCode::kConfig,
                    fmt::format("store key file {}: {} bytes; it must hold 32 random bytes or 64 "
                                "hex digits (head -c 32 /dev/urandom > FILE; chmod 600 FILE)",
                                path, text->size()));
}

EtcdStore::EtcdStore(std::shared_ptr<EtcdClient> client, EtcdStoreOptions options,
                     std::string description)
    : client_(std::move(client)),
      options_(std::move(options)),
      description_(std::move(description)),
      prefix_(domain_prefix(options_.domain)) {}

EtcdStore::~EtcdStore() = default;

common::Result<std::unique_ptr<EtcdStore>> EtcdStore::open(std::shared_ptr<EtcdClient> client,
                                                           EtcdStoreOptions options,
                                                           std::string description) {
  if (options.store_key.size() != kStoreKeyBytes) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("etcd store {}: the store key has {} bytes, "
                                  "not {}",
                                  description, options.store_key.size(), kStoreKeyBytes));
  }
  if (options.domain.empty() || options.domain.find('/') != std::string::npos) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("etcd store {}: domain '{}' cannot name a key prefix",
                                  description, options.domain));
  }
  std::unique_ptr<EtcdStore> store(
      new EtcdStore(std::move(client), std::move(options), std::move(description)));
  const std::string key = store->prefix_ + "meta/domain";
  auto found = store->client_->range(key);
  if (!found) return std::unexpected(found.error());
  if (found->kvs.empty()) {  // a new domain: its name, sealed (which also proves the key later)
    auto sealed = store->seal(key, store->options_.domain);
    if (!sealed) return std::unexpected(sealed.error());
    auto created = store->client_->txn(
        {Compare{key, Compare::Target::kCreateRevision, Compare::Result::kEqual, 0, ""}},
        {store->put(key, *sealed)});
    if (!created) return std::unexpected(created.error());
    return store;
  }
  auto domain = store->open_value(found->kvs.front());
  if (!domain) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("etcd store {}: {}: the store key is not the one this domain's "
                                  "state was written with",
                                  store->description_, domain.error().message));
  }
  if (*domain != store->options_.domain) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("etcd store {}: {} names domain '{}', not '{}'",
                                  store->description_, key, *domain, store->options_.domain));
  }
  return store;
}

common::Result<std::string> EtcdStore::seal(const std::string& key,
                                            const std::string& plain) const {
  return seal_value(options_.store_key, key, plain);
}

common::Result<std::string> EtcdStore::open_value(const KeyValue& kv) const {
  return open_sealed(options_.store_key, kv.key, kv.value);
}

Operation EtcdStore::put(const std::string& key, const std::string& sealed) const {
  return Operation{Operation::Kind::kPut, key, sealed, "", 0, 0};
}

common::Result<void> EtcdStore::write(std::vector<Compare> compares,
                                      const std::vector<Operation>& ops, const std::string& what) {
  if (uncertain_) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("etcd store {}: an earlier write's outcome is unknown; this "
                                  "replica reloads its state before writing again",
                                  description_));
  }
  const Fence& fence = options_.fence;
  if (fence.create_revision > 0) {
    compares.push_back(Compare{fence.leader_key, Compare::Target::kCreateRevision,
                               Compare::Result::kEqual, fence.create_revision, ""});
  }
  std::vector<Operation> failure;
  if (fence.create_revision > 0) {
    failure.push_back(Operation{Operation::Kind::kRange, fence.leader_key, "", "", 0, 0});
  }
  auto done = client_->txn(compares, ops, failure);
  if (!done) {
    // Sent, perhaps applied, perhaps not (or applied by a retry on another member): nothing
    // more is written until the state is read again from etcd.
    uncertain_ = true;
    return make_error(ErrorCode::kUnavailable, fmt::format("etcd store {}: {}: {}", description_,
                                                           what, done.error().message));
  }
  if (!done->succeeded) {
    const bool lost = fence.create_revision > 0 &&
                      (done->ranges.empty() || done->ranges.front().empty() ||
                       done->ranges.front().front().create_revision != fence.create_revision);
    if (lost) {
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("etcd store {}: {}: this replica is no longer the leader "
                                    "(its lease on {} is gone)",
                                    description_, what, fence.leader_key));
    }
    uncertain_ = true;
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("etcd store {}: {}: a key this write creates exists already "
                                  "(another writer); reloading",
                                  description_, what));
  }
  commits_.fetch_add(1);
  return {};
}

common::Result<uint64_t> EtcdStore::read_number(const std::string& key, uint64_t absent) {
  auto found = client_->range(prefix_ + key);
  if (!found) return std::unexpected(found.error());
  if (found->kvs.empty()) return absent;
  auto text = open_value(found->kvs.front());
  if (!text) return std::unexpected(text.error());
  try {
    return std::stoull(*text);
  } catch (const std::exception&) {
    return make_error(ErrorCode::kInternal, fmt::format("{}{}: not a number", prefix_, key));
  }
}

common::Result<void> EtcdStore::scan(
    const std::string& section,
    const std::function<common::Result<void>(const KeyValue&, std::string&&)>& f) {
  const std::string from = prefix_ + section;
  return for_each_page(*client_, EtcdClient::RangeQuery{from, prefix_end(from), options_.page_keys},
                       [&](RangeResult& page) -> common::Result<void> {
                         for (const KeyValue& kv : page.kvs) {
                           auto value = open_value(kv);
                           if (!value) return std::unexpected(value.error());
                           if (auto ok = f(kv, std::move(*value)); !ok) return ok;
                         }
                         return {};
                       });
}

common::Result<journal::Loaded> EtcdStore::load() {
  journal::Loaded loaded;
  auto next_key = read_number("meta/next_key", 1);
  if (!next_key) return std::unexpected(next_key.error());
  loaded.next_key = *next_key;
  auto next_seq = read_number("meta/event_seq", 1);
  if (!next_seq) return std::unexpected(next_seq.error());
  next_seq_ = static_cast<int64_t>(*next_seq);
  // One reader per section (kWarmSections), fed from etcd page by page or from the warm copy.
  using Reader = std::function<common::Result<void>(const KeyValue&, std::string&&)>;
  const Reader reservations = [&](const KeyValue&, std::string&& body) -> common::Result<void> {
    loaded.reservations.push_back(std::move(body));
    return {};
  };
  const Reader requests = [&](const KeyValue& kv, std::string&& text) -> common::Result<void> {
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    if (ec || !v.is_object()) return make_error(ErrorCode::kInternal, kv.key + ": not JSON");
    const json::object& o = v.as_object();
    loaded.requests.push_back(
        {text_in(o, "client_request_id"), text_in(o, "fingerprint"), text_in(o, "reservation_id")});
    return {};
  };
  const Reader pools = [&](const KeyValue&, std::string&& body) -> common::Result<void> {
    loaded.pools.push_back(std::move(body));
    return {};
  };
  const std::pair<std::string, const Reader*> readers[] = {
      {kWarmSections[0], &reservations}, {kWarmSections[1], &requests}, {kWarmSections[2], &pools}};
  if (options_.warm && options_.warm->prefix() == prefix_) {
    auto synced = options_.warm->sync();
    if (!synced) return std::unexpected(synced.error());
    warm_counts_ = *synced;
    WarmSections rows = options_.warm->take();
    for (const auto& [section, reader] : readers) {
      KeyValue kv;
      for (auto& [key, row] : rows[section]) {
        kv.key = key;
        if (auto ok = (*reader)(kv, std::move(row.value)); !ok) return std::unexpected(ok.error());
      }
    }
  } else {
    for (const auto& [section, reader] : readers) {
      if (auto ok = scan(section, *reader); !ok) return std::unexpected(ok.error());
    }
  }
  auto events = client_->range(prefix_ + "events/", prefix_end(prefix_ + "events/"), 1);
  if (!events) return std::unexpected(events.error());
  loaded.events = events->count;
  loaded_ = true;
  uncertain_ = false;
  return loaded;
}

common::Result<void> EtcdStore::record(const journal::Event& event, uint64_t next_key,
                                       const journal::RequestRecord* request) {
  if (!loaded_) {
    auto next_seq = read_number("meta/event_seq", 1);
    if (!next_seq) return std::unexpected(next_seq.error());
    next_seq_ = static_cast<int64_t>(*next_seq);
    loaded_ = true;
  }
  const int64_t seq = next_seq_;
  const std::string event_key = prefix_ + seq_key(seq);
  std::vector<std::pair<std::string, std::string>> values = {
      {event_key, event_value(seq, event)},
      {prefix_ + "reservations/" + event.id, event.body},
      {prefix_ + "meta/next_key", std::to_string(next_key)},
      {prefix_ + "meta/event_seq", std::to_string(seq + 1)},
  };
  if (request != nullptr) {
    values.emplace_back(prefix_ + "requests/" + request->client_request_id,
                        request_value(*request, event.at_ns));
  }
  std::vector<Operation> ops;
  for (const auto& [key, value] : values) {
    auto sealed = seal(key, value);
    if (!sealed) return std::unexpected(sealed.error());
    ops.push_back(put(key, *sealed));
  }
  auto ok =
      write({Compare{event_key, Compare::Target::kCreateRevision, Compare::Result::kEqual, 0, ""}},
            ops, "transition of " + event.id);
  if (ok) next_seq_ = seq + 1;
  return ok;
}

common::Result<void> EtcdStore::put_pool(const std::string& name, const std::string* body) {
  const std::string key = prefix_ + "pools/" + name;
  if (body == nullptr) {
    return write({}, {Operation{Operation::Kind::kDelete, key, "", "", 0, 0}}, "pool " + name);
  }
  auto sealed = seal(key, *body);
  if (!sealed) return std::unexpected(sealed.error());
  return write({}, {put(key, *sealed)}, "pool " + name);
}

common::Result<void> EtcdStore::put_federation(const std::string& kind, const std::string& id,
                                               const std::string& body, int64_t /*at_ns*/,
                                               uint64_t next_key) {
  const std::string key = prefix_ + "federation/" + kind + "/" + id;
  auto sealed = seal(key, body);
  if (!sealed) return std::unexpected(sealed.error());
  std::vector<Operation> ops{put(key, *sealed)};
  if (next_key > 0) {
    const std::string meta = prefix_ + "meta/next_key";
    auto sealed_key = seal(meta, std::to_string(next_key));
    if (!sealed_key) return std::unexpected(sealed_key.error());
    ops.push_back(put(meta, *sealed_key));
  }
  return write({}, ops, "federation " + kind + " " + id);
}

common::Result<std::vector<std::pair<std::string, std::string>>> EtcdStore::federation_rows(
    const std::string& kind) {
  const std::string section = "federation/" + kind + "/";
  std::vector<std::pair<int64_t, std::pair<std::string, std::string>>> rows;
  auto ok = scan(section, [&](const KeyValue& kv, std::string&& body) -> common::Result<void> {
    rows.push_back(
        {kv.create_revision, {kv.key.substr(prefix_.size() + section.size()), std::move(body)}});
    return {};
  });
  if (!ok) return std::unexpected(ok.error());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& row : rows) out.push_back(std::move(row.second));
  return out;
}

common::Result<void> EtcdStore::erase_freed() {
  // Values replaced (a rotated key's sealed body) live on in etcd's history until a compaction:
  // compact up to now. What was replaced was sealed anyway; this bounds how long it is kept.
  auto now = client_->range(prefix_ + "meta/domain");
  if (!now) return std::unexpected(now.error());
  return client_->compact(now->revision);
}

common::Result<void> EtcdStore::for_each_event(
    const std::function<void(const journal::Event&)>& f) {
  return scan("events/", [&](const KeyValue& kv, std::string&& text) -> common::Result<void> {
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    if (ec || !v.is_object()) return make_error(ErrorCode::kInternal, kv.key + ": not JSON");
    const json::object& o = v.as_object();
    auto seq = number_in(o, "seq");
    if (!seq) return std::unexpected(seq.error());
    auto at = number_in(o, "at_unix_ns");
    if (!at) return std::unexpected(at.error());
    f(journal::Event{*seq, *at, text_in(o, "id"), text_in(o, "from"), text_in(o, "to"),
                     text_in(o, "reason"), text_in(o, "body")});
    return {};
  });
}

common::Result<void> EtcdStore::import_snapshot(const journal::Snapshot& snapshot) {
  for (const char* section : {"reservations/", "events/", "archive/"}) {
    auto found = client_->range(prefix_ + section, prefix_end(prefix_ + section), 1);
    if (!found) return std::unexpected(found.error());
    if (found->count > 0) {
      return make_error(ErrorCode::kConfig,
                        fmt::format("etcd store {}: {}{} holds {} keys: migrate into an empty "
                                    "domain",
                                    description_, prefix_, section, found->count));
    }
  }
  std::vector<std::pair<std::string, std::string>> values;
  int64_t seq = 0;
  for (const journal::Event& e : snapshot.events) {
    seq = std::max(seq + 1, e.seq);
    values.emplace_back(prefix_ + seq_key(seq), event_value(seq, e));
  }
  for (const std::string& body : snapshot.state.reservations) {
    const std::string id = field_of(body, "id");
    if (id.empty()) return make_error(ErrorCode::kInvalidArgument, "a reservation without an id");
    values.emplace_back(prefix_ + "reservations/" + id, body);
  }
  for (const journal::ArchivedRow& row : snapshot.archived) {
    values.emplace_back(prefix_ + archive_key(row.key), archive_value(row));
  }
  for (const journal::RequestRecord& r : snapshot.state.requests) {
    values.emplace_back(prefix_ + "requests/" + r.client_request_id, request_value(r, 0));
  }
  for (const std::string& body : snapshot.state.pools) {
    const std::string name = field_of(body, "name");
    if (name.empty()) return make_error(ErrorCode::kInvalidArgument, "a pool without a name");
    values.emplace_back(prefix_ + "pools/" + name, body);
  }
  for (const journal::FederationRow& row : snapshot.federation) {
    values.emplace_back(prefix_ + "federation/" + row.kind + "/" + row.id, row.body);
  }
  values.emplace_back(prefix_ + "meta/next_key", std::to_string(snapshot.state.next_key));
  values.emplace_back(prefix_ + "meta/event_seq", std::to_string(seq + 1));
  // In batches (etcd bounds a transaction's operations); the counters last, so a migrate that
  // stops half-way is seen as not done (and refused again only once reservations exist).
  std::vector<Operation> batch;
  for (size_t i = 0; i < values.size(); ++i) {
    auto sealed = seal(values[i].first, values[i].second);
    if (!sealed) return std::unexpected(sealed.error());
    batch.push_back(put(values[i].first, *sealed));
    if (batch.size() == kOpsPerTxn || i + 1 == values.size()) {
      if (auto ok = write({}, batch, "import"); !ok) return ok;
      batch.clear();
    }
  }
  next_seq_ = seq + 1;
  loaded_ = true;
  return {};
}

}  // namespace detwan::control::store
