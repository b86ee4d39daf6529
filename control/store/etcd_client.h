#pragma once
// A blocking client of etcd v3 (docs/control.md, "The agent on etcd"): the key-value calls the
// agent's replicated store needs -- range, put, delete, transactions with compares, leases --
// over etcd's v3 JSON gateway (POST /v3/kv/..., /v3/lease/...; keys and values base64), with
// Boost.Beast through control/client's kept-alive connection pool.
//
// Why the JSON gateway: etcd's native API is gRPC, and Debian 12 packages no C++ etcd client
// (etcd-cpp-apiv3 is not in Debian); generating one from etcd's .proto files would pull gRPC and
// protobuf code generation into the build for four calls. The gateway is part of every etcd
// server (Debian's etcd-server 3.4 included), speaks the same API one to one, and is what
// etcd documents for clients without gRPC.
//
// Endpoints: every member of the cluster, "http://HOST:PORT"; a call goes to the endpoint that
// answered last and moves to the next one when it cannot connect or the member answers it is
// not ready (unavailable), so a client survives the loss of a member as long as a quorum
// answers. Errors: kUnavailable (no member answered: retryable), kInvalidArgument (etcd refused
// the request, with its message), kInternal (an answer that is not etcd's). Threading: every
// method is thread-safe (the pools are; the current endpoint is an atomic).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace detwan::control::client {
class HttpConnectionPool;
}

namespace detwan::control::store {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision when it answered
  std::vector<KeyValue> kvs;
  bool more = false;     // limit cut the answer
  int64_t count = 0;     // keys in the range (all of them, whatever limit)
};

// One condition of a transaction: the key's value, version, create or mod revision compared
// with `number` (or `value`). A key that does not exist has version, create and mod revision 0.
struct Compare {
  enum class Target { kValue, kVersion, kCreateRevision, kModRevision, kLease };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kModRevision;
  Result result = Result::kEqual;
  int64_t number = 0;
  std::string value;
};

// One operation of a transaction.
struct Operation {
  enum class Kind { kPut, kRange, kDelete };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;      // kPut
  std::string range_end;  // kRange / kDelete: "" = the key alone; prefix_end(key) = a prefix
  int64_t lease = 0;      // kPut: 0 = none
  int64_t limit = 0;      // kRange: 0 = no limit
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  // One entry per operation of the branch that ran; the key-values of its kRange operations
  // (empty for the others).
  std::vector<std::vector<KeyValue>> ranges;
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // as granted (a keepalive returns what is left after renewal)
};

// The end of the range of keys that start with `prefix` (etcd's convention: the prefix with its
// last byte incremented, carries dropped).
std::string prefix_end(const std::string& prefix);

class EtcdClient {
 public:
  // Endpoints "http://HOST:PORT" (at least one); nothing is contacted yet.
  static common::Result<std::unique_ptr<EtcdClient>> create(std::vector<std::string> endpoints,
                                                             int timeout_ms = 2000);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // keys_only: the key-values without their values (keys and revisions alone).
  common::Result<RangeResult> range(const std::string& key, const std::string& range_end = "",
                                    int64_t limit = 0, bool keys_only = false);
  // A range with etcd's filters: at `revision` (0: the latest), only keys modified after
  // `min_mod_revision` (0: all; etcd filters as it scans), or only the count.
  struct RangeQuery {
    std::string key;
    std::string range_end;
    int64_t limit = 0;
    bool keys_only = false;
    bool count_only = false;
    int64_t revision = 0;
    int64_t min_mod_revision = 0;
  };
  common::Result<RangeResult> range(const RangeQuery& query);
  // The revision of the put.
  common::Result<int64_t> put(const std::string& key, const std::string& value, int64_t lease = 0);
  // The number of keys deleted.
  common::Result<int64_t> erase(const std::string& key, const std::string& range_end = "");
  common::Result<TxnResult> txn(const std::vector<Compare>& compares,
                                const std::vector<Operation>& success,
                                const std::vector<Operation>& failure = {});
  // Drops the history before `revision` (superseded values); the current values stay.
  common::Result<void> compact(int64_t revision);
  common::Result<Lease> grant(int64_t ttl_s);
  // Renews the lease: the TTL left after renewal; 0 when the lease has expired (it is gone).
  common::Result<int64_t> keepalive(int64_t lease);
  common::Result<void> revoke(int64_t lease);

  // The endpoint calls go to now (tests, logs).
  [[nodiscard]] std::string current_endpoint() const;
  // Calls moved to another endpoint because one did not answer (tests, metrics).
  [[nodiscard]] uint64_t failovers() const noexcept { return failovers_.load(); }

 private:
  struct Member {
    std::string endpoint;
    std::shared_ptr<client::HttpConnectionPool> pool;
  };
  EtcdClient(std::vector<Member> members, int timeout_ms);
  // POST path with a JSON body to the current member, moving on when it does not answer.
  common::Result<std::string> call(const std::string& path, const std::string& body);

  std::vector<Member> members_;
  int timeout_ms_;
  std::atomic<size_t> current_{0};
  std::atomic<uint64_t> failovers_{0};
};

// Every key-value of [query.key, query.range_end) in key order, query.limit per call (> 0; etcd
// counts the rest of the range on each), handed to `f` page by page (the page's revision is the
// store's when that call answered). Stops at the first error, of etcd or of `f`.
common::Result<void> for_each_page(EtcdClient& client, EtcdClient::RangeQuery query,
                                   const std::function<common::Result<void>(RangeResult&)>& f);

}  // namespace detwan::control::store
