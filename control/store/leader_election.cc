#include "control/store/leader_election.h"

#include <chrono>
#include <utility>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/logging.h"

namespace detwan::control::store {
namespace {

namespace json = boost::json;

std::optional<LeaderInfo> leader_of(const KeyValue& kv) {
  boost::system::error_code ec;
  const json::value v = json::parse(kv.value, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::object& o = v.as_object();
  LeaderInfo info;
  if (const json::value* r = o.if_contains("replica"); r != nullptr && r->is_string()) {
    info.replica = std::string(r->as_string());
  }
  if (const json::value* u = o.if_contains("url"); u != nullptr && u->is_string()) {
    info.url = std::string(u->as_string());
  }
  return info;
}

}  // namespace

LeaderElection::LeaderElection(std::shared_ptr<EtcdClient> client, ElectionOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      key_(domain_prefix(options_.domain) + "leader") {}

common::Result<std::unique_ptr<LeaderElection>> LeaderElection::start(
    std::shared_ptr<EtcdClient> client, ElectionOptions options) {
  if (options.lease_ttl_s < 1) {
    return common::make_error(common::ErrorCode::kConfig, "the leader lease needs a TTL >= 1 s");
  }
  if (options.replica.empty()) {
    return common::make_error(common::ErrorCode::kConfig,
                              "a replica needs a name (--replica NAME, unique in the domain)");
  }
  std::unique_ptr<LeaderElection> election(
      new LeaderElection(std::move(client), std::move(options)));
  election->thread_ = std::thread([raw = election.get()] { raw->run(); });
  return election;
}

LeaderElection::~LeaderElection() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lease_ != 0) (void)client_->revoke(lease_);  // the next leader need not wait for the TTL
}

std::optional<Fence> LeaderElection::term() const {
  std::lock_guard lock(mutex_);
  return term_;
}

bool LeaderElection::leading_now() const {
  std::lock_guard lock(mutex_);
  const int64_t margin_ns = options_.lease_ttl_s * 1'000'000'000 / 4;
  return term_.has_value() && clock_.now_ns() + margin_ns < lease_deadline_ns_;
}

std::optional<LeaderInfo> LeaderElection::leader() const {
  std::lock_guard lock(mutex_);
  return leader_;
}

uint64_t LeaderElection::terms_won() const {
  std::lock_guard lock(mutex_);
  return won_;
}

uint64_t LeaderElection::terms_lost() const {
  std::lock_guard lock(mutex_);
  return lost_;
}

void LeaderElection::resign() {
  {
    std::lock_guard lock(mutex_);
    resign_ = true;
  }
  wake_.notify_all();
}

void LeaderElection::run() {
  const auto period = std::chrono::milliseconds(options_.lease_ttl_s * 1000 / 4);
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    round();
    lock.lock();
    wake_.wait_for(lock, period, [this] { return stop_ || resign_; });
  }
}

void LeaderElection::step_down_locked(const char* why) {
  if (term_) {
    ++lost_;
    common::logger("detwan-agent")
        ->warn("replica {}: no longer the leader of {} ({})", options_.replica, options_.domain,
               why);
  }
  term_.reset();
  lease_deadline_ns_ = 0;
  if (leader_ && leader_->replica == options_.replica) leader_.reset();
}

void LeaderElection::round() {
  bool leading = false;
  bool resign = false;
  {
    std::lock_guard lock(mutex_);
    leading = term_.has_value();
    resign = resign_;
    resign_ = false;
  }
  if (resign) {
    int64_t lease = 0;
    {
      std::lock_guard lock(mutex_);
      step_down_locked("resigned");
      lease = std::exchange(lease_, 0);
    }
    if (lease != 0) (void)client_->revoke(lease);
    return;
  }
  if (leading) {
    renew();
  } else {
    campaign();
  }
}

void LeaderElection::campaign() {
  auto current = client_->range(key_);
  if (!current) return;  // etcd unreachable: try again next round
  if (!current->kvs.empty()) {
    std::lock_guard lock(mutex_);
    leader_ = leader_of(current->kvs.front());
    return;
  }
  auto lease = client_->grant(options_.lease_ttl_s);
  if (!lease) return;
  const int64_t sent_ns = clock_.now_ns();
  const std::string value = json::serialize(
      json::object{{"replica", options_.replica}, {"url", options_.url}});
  auto won = client_->txn(
      {Compare{key_, Compare::Target::kCreateRevision, Compare::Result::kEqual, 0, ""}},
      {Operation{Operation::Kind::kPut, key_, value, "", lease->id, 0}},
      {Operation{Operation::Kind::kRange, key_, "", "", 0, 0}});
  if (!won || !won->succeeded) {
    (void)client_->revoke(lease->id);
    if (won && !won->ranges.empty() && !won->ranges.front().empty()) {
      std::lock_guard lock(mutex_);
      leader_ = leader_of(won->ranges.front().front());
    }
    return;
  }
  std::lock_guard lock(mutex_);
  lease_ = lease->id;
  term_ = Fence{key_, won->revision};  // the put's revision is the key's create revision
  lease_deadline_ns_ = sent_ns + lease->ttl_s * 1'000'000'000;
  leader_ = LeaderInfo{options_.replica, options_.url};
  ++won_;
  common::logger("detwan-agent")
      ->info("replica {}: elected leader of {} (term {}, lease TTL {} s)", options_.replica,
             options_.domain, won->revision, lease->ttl_s);
}

void LeaderElection::renew() {
  int64_t lease = 0;
  int64_t create_revision = 0;
  {
    std::lock_guard lock(mutex_);
    lease = lease_;
    create_revision = term_ ? term_->create_revision : 0;
  }
  const int64_t sent_ns = clock_.now_ns();
  auto left = client_->keepalive(lease);
  auto current = client_->range(key_);
  std::unique_lock lock(mutex_);
  if (!term_) return;  // resigned meanwhile
  if (left && *left > 0) lease_deadline_ns_ = sent_ns + *left * 1'000'000'000;
  const char* why = nullptr;
  if (left && *left == 0) {
    why = "the lease expired";
  } else if (current && (current->kvs.empty() ||
                         current->kvs.front().create_revision != create_revision)) {
    why = "the leader key is gone or another replica's";
  } else if (clock_.now_ns() >= lease_deadline_ns_) {
    why = "the lease could not be renewed in time";
  }
  if (why == nullptr) return;
  step_down_locked(why);
  if (current && !current->kvs.empty()) leader_ = leader_of(current->kvs.front());
  const int64_t old = std::exchange(lease_, 0);
  lock.unlock();
  if (old != 0) (void)client_->revoke(old);
}

}  // namespace detwan::control::store
