#include "transport/loopback/fabric.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/clock.h"

namespace detwan::transport::loopback {
namespace {

struct Later {
  bool operator()(const Inbound& a, const Inbound& b) const {
    return a.deliver_at_ns != b.deliver_at_ns ? a.deliver_at_ns > b.deliver_at_ns
                                              : a.order > b.order;
  }
};

std::chrono::steady_clock::time_point to_time_point(int64_t ns) {
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
}

}  // namespace

bool Mailbox::push(Inbound&& inbound) {
  bool earliest = false;
  {
    std::lock_guard lock(mutex_);
    if (heap_.size() >= kMaxQueuedDatagrams) return false;
    inbound.order = next_order_++;
    earliest = heap_.empty() || Later{}(heap_.front(), inbound);
    heap_.push_back(std::move(inbound));
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }
  if (earliest) changed_.notify_one();
  return true;
}

void Mailbox::take_due(int64_t deadline_ns, std::vector<Inbound>& out) {
  out.clear();
  const common::MonotonicClock clock;
  std::unique_lock lock(mutex_);
  while (true) {
    const int64_t now_ns = clock.now_ns();
    if (woken_ || (!heap_.empty() && heap_.front().deliver_at_ns <= now_ns)) break;
    int64_t until_ns = deadline_ns;
    if (!heap_.empty()) until_ns = std::min(until_ns, heap_.front().deliver_at_ns);
    if (until_ns <= now_ns) break;
    // steady_clock is CLOCK_MONOTONIC on Linux, the clock of deadline_ns.
    if (until_ns == INT64_MAX) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, to_time_point(until_ns));
    }
  }
  woken_ = false;
  const int64_t now_ns = clock.now_ns();
  while (!heap_.empty() && heap_.front().deliver_at_ns <= now_ns) {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    out.push_back(std::move(heap_.back()));
    heap_.pop_back();
  }
}

void Mailbox::wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  changed_.notify_one();
}

Fabric& Fabric::instance() {
  static Fabric fabric;  // the deliberate process-scope object (see fabric.h)
  return fabric;
}

common::Result<Port> Fabric::bind(const std::string& name, const std::shared_ptr<Mailbox>& mailbox,
                                  SocketId socket) {
  if (name.empty()) {
    return common::make_error(common::ErrorCode::kInvalidArgument, "loopback: empty address");
  }
  std::lock_guard lock(mutex_);
  if (ports_.count(name) != 0) {
    return common::make_error(common::ErrorCode::kAlreadyExists,
                              fmt::format("loopback: address '{}' is already in use", name));
  }
  Port port{mailbox, mailbox.get(), socket, std::make_shared<const std::string>(name)};
  ports_.emplace(name, port);
  return port;
}

Port Fabric::bind_unique(const std::shared_ptr<Mailbox>& mailbox, SocketId socket) {
  std::lock_guard lock(mutex_);
  std::string name;
  do {
    name = fmt::format("lo-{}", next_unique_++);
  } while (ports_.count(name) != 0);
  Port port{mailbox, mailbox.get(), socket, std::make_shared<const std::string>(name)};
  ports_.emplace(name, port);
  return port;
}

void Fabric::unbind(const std::string& name) {
  std::lock_guard lock(mutex_);
  ports_.erase(name);
}

common::Result<Port> Fabric::resolve(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = ports_.find(name);
  if (it == ports_.end()) {
    return common::make_error(common::ErrorCode::kNotFound,
                              fmt::format("loopback: no endpoint listens on '{}'", name));
  }
  return it->second;
}

common::Result<void> Fabric::set_partitioned(const std::string& name, bool partitioned) {
  auto port = resolve(name);
  if (!port) return std::unexpected(port.error());
  std::shared_ptr<Mailbox> mailbox = port->mailbox.lock();
  if (!mailbox) {
    return common::make_error(common::ErrorCode::kNotFound,
                              fmt::format("loopback: endpoint of '{}' is gone", name));
  }
  mailbox->partitioned.store(partitioned, std::memory_order_release);
  return {};
}

}  // namespace detwan::transport::loopback
