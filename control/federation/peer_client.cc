// HTTP(S) calls to peer agents, and the fault injector.
#include "control/federation/peer_client.h"

#include <chrono>
#include <condition_variable>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/secret_file.h"

namespace detwan::control::federation {
namespace json = boost::json;

common::Result<std::unique_ptr<HttpPeerClient>> HttpPeerClient::create(
    const model::Topology& topology) {
  auto out = std::make_unique<HttpPeerClient>();
  out->user_agent_ = "detwan-agent/" + topology.domain;
  out->timeout_ms_ = static_cast<int>(topology.federation.call_timeout_ns / 1'000'000);
  for (const model::FederationPeer& p : topology.federation.peers) {
    Peer peer;
    peer.domain = p.domain;
    peer.url_text = p.url;
    // An https URL fails here until the client speaks TLS: said at each call, not at start.
    auto url = client::parse_url(p.url);
    if (url) peer.url = *url;
    if (!url) peer.url_error = url.error().message;
    peer.tls = client::TlsClientOptions{p.ca, topology.federation.cert, topology.federation.key};
    if (url) {
      auto pool = client::HttpConnectionPool::create(*url, url->https ? &peer.tls : nullptr,
                                                     out->user_agent_);
      if (pool) peer.pool = std::move(*pool);
      if (!pool) peer.pool_error = pool.error().message;
    }
    if (!p.token_file.empty()) {
      auto token = common::read_secret_file(p.token_file, "token file");
      if (!token) return std::unexpected(token.error());
      peer.token = *token;
      while (!peer.token.empty() && (peer.token.back() == '\n' || peer.token.back() == ' ')) {
        peer.token.pop_back();
      }
    }
    out->peers_.push_back(std::move(peer));
  }
  return out;
}

PeerAnswer HttpPeerClient::call(const std::string& domain, const std::string& method,
                                const std::string& path, const std::string& body) {
  PeerAnswer answer;
  const Peer* peer = nullptr;
  for (const Peer& p : peers_) {
    if (p.domain == domain) peer = &p;
  }
  if (peer == nullptr) {
    answer.error = fmt::format("domain '{}' is not one of federation.peers", domain);
    return answer;
  }
  if (!peer->url_error.empty() || !peer->pool) {
    answer.error = fmt::format("domain {} ({}): {}", domain, peer->url_text,
                               !peer->url_error.empty() ? peer->url_error : peer->pool_error);
    return answer;
  }
  // client::http_call's deadline only bounds what it does asynchronously (its synchronous
  // read waits for the peer however long it takes), so the call runs on its own thread and is
  // given up at the deadline; a late answer is dropped when it comes. At most kMaxStuckCalls
  // such calls may be outstanding.
  struct Shared {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    bool given_up = false;
    common::Result<client::HttpAnswer> result =
        common::make_error(common::ErrorCode::kInternal, "not run");
  };
  if (stuck_->load() >= kMaxStuckCalls) {
    answer.error = fmt::format("domain {} ({}): {} earlier calls are still unanswered", domain,
                               peer->url_text, stuck_->load());
    return answer;
  }
  auto shared = std::make_shared<Shared>();
  std::thread([shared, stuck = stuck_, pool = peer->pool, method, path, body, token = peer->token,
               timeout = timeout_ms_] {
    auto result = pool->call(method, path, body, token, timeout);
    std::lock_guard lock(shared->mutex);
    shared->result = std::move(result);
    shared->done = true;
    if (shared->given_up) --*stuck;
    shared->done_cv.notify_all();
  }).detach();
  std::unique_lock lock(shared->mutex);
  if (!shared->done_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms_),
                                [&] { return shared->done; })) {
    shared->given_up = true;
    ++*stuck_;
    answer.timed_out = true;
    answer.error =
        fmt::format("domain {} ({}): no answer within {} ms", domain, peer->url_text, timeout_ms_);
    return answer;
  }
  auto got = std::move(shared->result);
  if (!got) {
    answer.timed_out = got.error().code == common::ErrorCode::kTimeout;
    answer.error = fmt::format("domain {} ({}): {}", domain, peer->url_text, got.error().message);
    return answer;
  }
  answer.status = got->status;
  boost::system::error_code ec;
  json::value v = json::parse(got->body, ec);
  if (ec) {
    answer.body_error = "is not JSON";
  } else if (!v.is_object()) {
    answer.body_error = "is not a JSON object";
  } else {
    answer.body = std::move(v.as_object());
  }
  return answer;
}

std::string phase_of(const std::string& method, const std::string& path) {
  if (path.rfind("/v1/federation/view", 0) == 0) return "view";
  const std::string base = "/v1/federation/segments";
  if (path.rfind(base, 0) != 0) return "other";
  std::string rest = path.substr(base.size());
  const size_t q = rest.find('?');
  const bool has_query = q != std::string::npos;
  rest = rest.substr(0, q);
  if (rest.empty()) return method == "POST" ? "reserve" : has_query ? "lookup" : "other";
  const size_t slash = rest.find('/', 1);
  if (slash == std::string::npos) return method == "PATCH" ? "modify" : "get";
  return rest.substr(slash + 1);
}

void FaultInjector::add(Fault fault) {
  std::lock_guard lock(mutex_);
  faults_.push_back(std::move(fault));
}

void FaultInjector::clear() {
  std::lock_guard lock(mutex_);
  faults_.clear();
}

std::optional<FaultKind> FaultInjector::match(const std::string& domain, const std::string& phase) {
  std::lock_guard lock(mutex_);
  for (Fault& f : faults_) {
    if (f.domain != domain || f.phase != phase || f.times == 0) continue;
    if (f.times > 0) --f.times;
    return f.kind;
  }
  return std::nullopt;
}

}  // namespace detwan::control::federation
