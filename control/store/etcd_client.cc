#include "control/store/etcd_client.h"

#include <openssl/evp.h>

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "control/client/http_client.h"

namespace detwan::control::store {
namespace {

namespace json = boost::json;
using common::ErrorCode;
using common::make_error;

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

common::Result<std::string> unbase64(std::string_view text) {
  if (text.size() % 4 != 0) {
    return make_error(ErrorCode::kInternal, "etcd: a key or value is not base64");
  }
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return make_error(ErrorCode::kInternal, "etcd: a key or value is not base64");
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') ++padding;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++padding;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

// etcd's JSON gateway writes 64-bit numbers as strings and leaves out zero values.
int64_t number_of(const json::object& object, std::string_view key) {
  const json::value* v = object.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_string()) {
    try {
      return std::stoll(std::string(v->as_string()));
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

common::Result<json::object> parse_object(const std::string& text, std::string_view call) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec || !value.is_object()) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("etcd {}: the answer is not a JSON object", call));
  }
  return std::move(value.as_object());
}

common::Result<std::vector<KeyValue>> kvs_of(const json::object& answer) {
  std::vector<KeyValue> out;
  const json::value* kvs = answer.if_contains("kvs");
  if (kvs == nullptr || !kvs->is_array()) return out;
  for (const json::value& item : kvs->as_array()) {
    if (!item.is_object()) return make_error(ErrorCode::kInternal, "etcd: a kv is not an object");
    const json::object& o = item.as_object();
    KeyValue kv;
    const auto text = [&](std::string_view key) -> common::Result<std::string> {
      const json::value* v = o.if_contains(key);
      if (v == nullptr) return std::string();
      if (!v->is_string()) return make_error(ErrorCode::kInternal, "etcd: a kv field is not text");
      return unbase64(v->as_string());
    };
    auto key = text("key");
    if (!key) return std::unexpected(key.error());
    auto value = text("value");
    if (!value) return std::unexpected(value.error());
    kv.key = std::move(*key);
    kv.value = std::move(*value);
    kv.create_revision = number_of(o, "create_revision");
    kv.mod_revision = number_of(o, "mod_revision");
    kv.version = number_of(o, "version");
    kv.lease = number_of(o, "lease");
    out.push_back(std::move(kv));
  }
  return out;
}

int64_t revision_of(const json::object& answer) {
  const json::value* header = answer.if_contains("header");
  return header != nullptr && header->is_object() ? number_of(header->as_object(), "revision") : 0;
}

json::object range_request(const EtcdClient::RangeQuery& q) {
  json::object r{{"key", base64(q.key)}};
  if (!q.range_end.empty()) r["range_end"] = base64(q.range_end);
  if (q.limit > 0) r["limit"] = std::to_string(q.limit);
  if (q.keys_only) r["keys_only"] = true;
  if (q.count_only) r["count_only"] = true;
  if (q.revision > 0) r["revision"] = std::to_string(q.revision);
  if (q.min_mod_revision > 0) r["min_mod_revision"] = std::to_string(q.min_mod_revision);
  return r;
}

json::object operation_json(const Operation& op) {
  switch (op.kind) {
    case Operation::Kind::kPut: {
      json::object put{{"key", base64(op.key)}, {"value", base64(op.value)}};
      if (op.lease != 0) put["lease"] = std::to_string(op.lease);
      return {{"request_put", std::move(put)}};
    }
    case Operation::Kind::kRange:
      return {{"request_range", range_request({op.key, op.range_end, op.limit})}};
    case Operation::Kind::kDelete: {
      json::object del{{"key", base64(op.key)}};
      if (!op.range_end.empty()) del["range_end"] = base64(op.range_end);
      return {{"request_delete_range", std::move(del)}};
    }
  }
  return {};
}

json::object compare_json(const Compare& c) {
  static constexpr const char* kTargets[] = {"VALUE", "VERSION", "CREATE", "MOD", "LEASE"};
  static constexpr const char* kResults[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  json::object out{{"key", base64(c.key)},
                   {"target", kTargets[static_cast<int>(c.target)]},
                   {"result", kResults[static_cast<int>(c.result)]}};
  switch (c.target) {
    case Compare::Target::kValue:
      out["value"] = base64(c.value);
      break;
    case Compare::Target::kVersion:
      out["version"] = std::to_string(c.number);
      break;
    case Compare::Target::kCreateRevision:
      out["create_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kModRevision:
      out["mod_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kLease:
      out["lease"] = std::to_string(c.number);
      break;
  }
  return out;
}

}  // namespace

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key (etcd: "\0" as range_end means "to the end")
}

common::Result<std::unique_ptr<EtcdClient>> EtcdClient::create(std::vector<std::string> endpoints,
                                                               int timeout_ms) {
  if (endpoints.empty()) {
    return make_error(ErrorCode::kConfig, "etcd: no endpoint (give http://HOST:PORT,...)");
  }
  std::vector<Member> members;
  for (std::string& endpoint : endpoints) {
    auto url = client::parse_url(endpoint);
    if (!url) {
      return make_error(ErrorCode::kConfig,
                        fmt::format("etcd endpoint '{}': {}", endpoint, url.error().message));
    }
    if (url->https) {
      return make_error(ErrorCode::kConfig,
                        fmt::format("etcd endpoint '{}': https is not supported yet; run etcd on "
                                    "a management network or loopback (docs/control.md)",
                                    endpoint));
    }
    auto pool = client::HttpConnectionPool::create(*url, nullptr, "detwan-agent");
    if (!pool) return std::unexpected(pool.error());
    members.push_back(Member{std::move(endpoint), std::move(*pool)});
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(members), timeout_ms));
}

EtcdClient::EtcdClient(std::vector<Member> members, int timeout_ms)
    : members_(std::move(members)), timeout_ms_(timeout_ms) {}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::current_endpoint() const {
  return members_[current_.load() % members_.size()].endpoint;
}

common::Result<std::string> EtcdClient::call(const std::string& path, const std::string& body) {
  std::string failures;
  const size_t first = current_.load();
  for (size_t k = 0; k < members_.size(); ++k) {
    const size_t index = (first + k) % members_.size();
    Member& member = members_[index];
    auto answer = member.pool->call("POST", path, body, "", timeout_ms_);
    if (answer && answer->status == 200) {
      if (index != first % members_.size()) {
        current_.store(index);
        failovers_.fetch_add(1);
      }
      return std::move(answer->body);
    }
    if (answer && answer->status != 503) {
      // etcd refused the request: {"error":"...","code":N,"message":"..."}.
      std::string message = answer->body;
      if (auto object = parse_object(answer->body, path);
          object && object->contains("message") && object->at("message").is_string()) {
        message = std::string(object->at("message").as_string());
      }
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("etcd {} {}: {} ({})", member.endpoint, path, message,
                                    answer->status));
    }
    failures += fmt::format("{}{}: {}", failures.empty() ? "" : "; ", member.endpoint,
                            answer ? "unavailable (503)" : answer.error().message);
  }
  return make_error(ErrorCode::kUnavailable,
                    fmt::format("etcd {}: no member answered ({})", path, failures));
}

common::Result<RangeResult> EtcdClient::range(const std::string& key, const std::string& range_end,
                                              int64_t limit, bool keys_only) {
  return range(RangeQuery{key, range_end, limit, keys_only});
}

common::Result<RangeResult> EtcdClient::range(const RangeQuery& query) {
  auto text = call("/v3/kv/range", json::serialize(range_request(query)));
  if (!text) return std::unexpected(text.error());
  auto answer = parse_object(*text, "range");
  if (!answer) return std::unexpected(answer.error());
  auto kvs = kvs_of(*answer);
  if (!kvs) return std::unexpected(kvs.error());
  RangeResult out;
  out.revision = revision_of(*answer);
  out.kvs = std::move(*kvs);
  out.count = number_of(*answer, "count");
  const json::value* more = answer->if_contains("more");
  out.more = more != nullptr && more->is_bool() && more->as_bool();
  return out;
}

common::Result<void> for_each_page(EtcdClient& client, EtcdClient::RangeQuery query,
                                   const std::function<common::Result<void>(RangeResult&)>& f) {
  while (true) {
    auto page = client.range(query);
    if (!page) return std::unexpected(page.error());
    if (page->kvs.empty()) return f(*page);
    std::string next = page->kvs.back().key + std::string(1, '\0');
    const bool more = page->more;
    if (auto ok = f(*page); !ok || !more) return ok;
    query.key = std::move(next);
  }
}

common::Result<int64_t> EtcdClient::put(const std::string& key, const std::string& value,
                                        int64_t lease) {
  Operation op{Operation::Kind::kPut, key, value, "", lease, 0};
  auto text = call("/v3/kv/put", json::serialize(operation_json(op).at("request_put")));
  if (!text) return std::unexpected(text.error());
  auto answer = parse_object(*text, "put");
  if (!answer) return std::unexpected(answer.error());
  return revision_of(*answer);
}

common::Result<int64_t> EtcdClient::erase(const std::string& key, const std::string& range_end) {
  Operation op{Operation::Kind::kDelete, key, "", range_end, 0, 0};
  auto text =
      call("/v3/kv/deleterange", json::serialize(operation_json(op).at("request_delete_range")));
  if (!text) return std::unexpected(text.error());
  auto answer = parse_object(*text, "deleterange");
  if (!answer) return std::unexpected(answer.error());
  return number_of(*answer, "deleted");
}

common::Result<TxnResult> EtcdClient::txn(const std::vector<Compare>& compares,
                                          const std::vector<Operation>& success,
                                          const std::vector<Operation>& failure) {
  json::array c, s, f;
  for (const Compare& compare : compares) c.push_back(compare_json(compare));
  for (const Operation& op : success) s.push_back(operation_json(op));
  for (const Operation& op : failure) f.push_back(operation_json(op));
  auto text = call("/v3/kv/txn", json::serialize(json::object{
                                     {"compare", std::move(c)},
                                     {"success", std::move(s)},
                                     {"failure", std::move(f)}}));
  if (!text) return std::unexpected(text.error());
  auto answer = parse_object(*text, "txn");
  if (!answer) return std::unexpected(answer.error());
  TxnResult out;
  const json::value* succeeded = answer->if_contains("succeeded");
  out.succeeded = succeeded != nullptr && succeeded->is_bool() && succeeded->as_bool();
  out.revision = revision_of(*answer);
  if (const json::value* responses = answer->if_contains("responses");
      responses != nullptr && responses->is_array()) {
    for (const json::value& r : responses->as_array()) {
      std::vector<KeyValue> kvs;
      if (r.is_object()) {
        if (const json::value* range = r.as_object().if_contains("response_range");
            range != nullptr && range->is_object()) {
          auto got = kvs_of(range->as_object());
          if (!got) return std::unexpected(got.error());
          kvs = std::move(*got);
        }
      }
      out.ranges.push_back(std::move(kvs));
    }
  }
  return out;
}

common::Result<void> EtcdClient::compact(int64_t revision) {
  auto text = call("/v3/kv/compaction",
                   json::serialize(json::object{{"revision", std::to_string(revision)}}));
  if (!text) {
    // Compacting to a revision already compacted is not a failure.
    if (text.error().message.find("compacted") != std::string::npos) return {};
    return std::unexpected(text.error());
  }
  return {};
}

common::Result<Lease> EtcdClient::grant(int64_t ttl_s) {
  auto text = call("/v3/lease/grant", json::serialize(json::object{{"TTL", std::to_string(ttl_s)}}));
  if (!text) return std::unexpected(text.error());
  auto answer = parse_object(*text, "lease grant");
  if (!answer) return std::unexpected(answer.error());
  if (const json::value* error = answer->if_contains("error");
      error != nullptr && error->is_string() && !error->as_string().empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("etcd lease grant: {}", std::string(error->as_string())));
  }
  return Lease{number_of(*answer, "ID"), number_of(*answer, "TTL")};
}

common::Result<int64_t> EtcdClient::keepalive(int64_t lease) {
  auto text =
      call("/v3/lease/keepalive", json::serialize(json::object{{"ID", std::to_string(lease)}}));
  if (!text) return std::unexpected(text.error());
  // The gateway streams: one {"result":{...}} object per line; the first is this renewal's.
  auto answer = parse_object(text->substr(0, text->find('\n')), "lease keepalive");
  if (!answer) return std::unexpected(answer.error());
  const json::value* result = answer->if_contains("result");
  if (result == nullptr || !result->is_object()) {
    return make_error(ErrorCode::kInternal, "etcd lease keepalive: no result in the answer");
  }
  return number_of(result->as_object(), "TTL");
}

common::Result<void> EtcdClient::revoke(int64_t lease) {
  auto text = call("/v3/lease/revoke", json::serialize(json::object{{"ID", std::to_string(lease)}}));
  if (!text) return std::unexpected(text.error());
  return {};
}

}  // namespace detwan::control::store
