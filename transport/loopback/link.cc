#include "transport/loopback/link.h"

#include <algorithm>

#include <fmt/format.h>

namespace detwan::transport::loopback {

LoopbackLink::LoopbackLink(const FaultConfig& faults)
    : faults_(faults),
      mailbox_(std::make_shared<Mailbox>()),
      tx_buffer_(kMaxDatagramBytes),
      random_(faults.seed) {}

LoopbackLink::~LoopbackLink() {
  for (Socket& socket : sockets_) {
    if (socket.open) Fabric::instance().unbind(*socket.port.name);
  }
}

SocketId LoopbackLink::add_socket(Port port) {
  sockets_.push_back(Socket{std::move(port), true});
  return static_cast<SocketId>(sockets_.size() - 1);
}

common::Result<std::pair<SocketId, std::string>> LoopbackLink::open_listen(
    const std::string& address) {
  const auto id = static_cast<SocketId>(sockets_.size());
  if (address.empty()) {
    Port port = Fabric::instance().bind_unique(mailbox_, id);
    add_socket(port);
    return std::pair{id, *port.name};
  }
  auto port = Fabric::instance().bind(address, mailbox_, id);
  if (!port) return std::unexpected(port.error());
  add_socket(*port);
  return std::pair{id, address};
}

common::Result<std::pair<SocketId, Port>> LoopbackLink::open_path(
    const PathSpec& path, const std::string& connect_address) {
  auto remote = Fabric::instance().resolve(connect_address);
  if (!remote) return std::unexpected(remote.error());
  const auto id = static_cast<SocketId>(sockets_.size());
  if (path.local.empty()) {
    add_socket(Fabric::instance().bind_unique(mailbox_, id));
  } else {
    auto port = Fabric::instance().bind(path.local, mailbox_, id);
    if (!port) return std::unexpected(port.error());
    add_socket(*port);
  }
  return std::pair{id, *remote};
}

void LoopbackLink::close_socket(SocketId socket) {
  if (socket >= sockets_.size() || !sockets_[socket].open) return;
  sockets_[socket].open = false;
  Fabric::instance().unbind(*sockets_[socket].port.name);
}

std::string LoopbackLink::local_name(SocketId socket) const {
  return socket < sockets_.size() ? *sockets_[socket].port.name : "?";
}

common::Status LoopbackLink::send(SocketId socket, const Port& destination, size_t size_bytes) {
  ++counters_.sent;
  if (socket >= sockets_.size() || size_bytes > tx_buffer_.size()) {
    return common::Status::kInvalidArgument;
  }
  std::shared_ptr<Mailbox> target = destination.mailbox.lock();
  if (!target) {
    ++counters_.dropped_no_route;
    return common::Status::kDropped;
  }
  if (mailbox_->partitioned.load(std::memory_order_acquire) ||
      target->partitioned.load(std::memory_order_acquire)) {
    ++counters_.dropped_partition;
    return common::Status::kDropped;
  }
  // Draw every random decision, in a fixed order, so a seed gives one fault pattern.
  const bool lost = faults_.loss > 0 && uniform() < faults_.loss;
  const bool duplicated = faults_.duplicate > 0 && uniform() < faults_.duplicate;
  const bool corrupted = faults_.corrupt > 0 && uniform() < faults_.corrupt;
  const bool reordered = faults_.reorder > 0 && uniform() < faults_.reorder;
  if (lost) {
    ++counters_.dropped_loss;
    return common::Status::kDropped;
  }
  const int64_t now_ns = clock_.now_ns();
  int64_t depart_ns = now_ns;
  if (faults_.rate_bps > 0) {
    depart_ns = std::max(now_ns, next_free_ns_);
    if (depart_ns - now_ns > kMaxBacklogNs) {
      ++counters_.dropped_queue;
      return common::Status::kDropped;
    }
    next_free_ns_ = depart_ns + static_cast<int64_t>(static_cast<double>(size_bytes) * 8e9 /
                                                     static_cast<double>(faults_.rate_bps));
  }
  const int copies = duplicated ? 2 : 1;
  if (duplicated) ++counters_.duplicated;
  for (int copy = 0; copy < copies; ++copy) {
    int64_t deliver_ns = depart_ns + faults_.delay_ns;
    if (faults_.jitter_ns > 0) {
      deliver_ns += std::uniform_int_distribution<int64_t>(-faults_.jitter_ns,
                                                           faults_.jitter_ns)(random_);
      deliver_ns = std::max(deliver_ns, depart_ns);
    }
    if (reordered && copy == 0) {
      ++counters_.reordered;
      deliver_ns += std::max<int64_t>(2 * faults_.jitter_ns, 1'000'000);
    }
    Inbound inbound;
    inbound.deliver_at_ns = deliver_ns;
    inbound.socket = destination.socket;
    inbound.source = sockets_[socket].port;
    inbound.bytes.assign(tx_buffer_.begin(), tx_buffer_.begin() + static_cast<ptrdiff_t>(size_bytes));
    if (corrupted && copy == 0 && size_bytes > 0) {
      ++counters_.corrupted;
      const size_t at = std::uniform_int_distribution<size_t>(0, size_bytes - 1)(random_);
      const auto flip = static_cast<std::byte>(std::uniform_int_distribution<int>(1, 255)(random_));
      inbound.bytes[at] ^= flip;
    }
    if (!target->push(std::move(inbound))) {
      ++counters_.dropped_queue;
      return common::Status::kDropped;
    }
  }
  return common::Status::kOk;
}

}  // namespace detwan::transport::loopback
