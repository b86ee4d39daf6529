#pragma once
// The loopback backend's in-memory datagram network.
//
// `Fabric::instance()` is the ONE deliberate process-scope object of the transport (like the
// kernel's `lo`): endpoints created independently in one process must find each other by name
// ("a", "b"), exactly as two processes find each other by IP address. It only maps names to
// mailboxes and holds the partition flags; all of it is behind one mutex.
//
// A Mailbox is the receive queue of one loopback endpoint (all its sockets): datagrams wait in it,
// ordered by delivery time, until the endpoint's progress thread takes them.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "transport/datagram/link.h"

namespace detwan::transport::loopback {

using datagram::SocketId;

class Mailbox;

// A socket on the fabric: where a datagram goes to or came from.
struct Port {
  std::weak_ptr<Mailbox> mailbox;
  const Mailbox* identity = nullptr;  // for comparisons without locking the weak_ptr
  SocketId socket = 0;
  std::shared_ptr<const std::string> name;
};

struct Inbound {
  int64_t deliver_at_ns = 0;
  uint64_t order = 0;  // arrival order among equal delivery times
  SocketId socket = 0;
  Port source;
  std::vector<std::byte> bytes;
};

class Mailbox {
 public:
  // Datagrams beyond this wait in no queue: the sender drops and counts them.
  static constexpr size_t kMaxQueuedDatagrams = 65536;

  // False (nothing queued) when the mailbox is full.
  bool push(Inbound&& inbound);
  // Waits until a datagram is due, wake() or deadline_ns (CLOCK_MONOTONIC); moves the due
  // datagrams into `out` (cleared first).
  void take_due(int64_t deadline_ns, std::vector<Inbound>& out);
  void wake();

  std::atomic<bool> partitioned{false};

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Inbound> heap_;  // min-heap by (deliver_at_ns, order)
  uint64_t next_order_ = 0;
  bool woken_ = false;
};

class Fabric {
 public:
  static Fabric& instance();

  // Registers `name` for (mailbox, socket). kAlreadyExists if taken, kInvalidArgument if empty.
  common::Result<Port> bind(const std::string& name, const std::shared_ptr<Mailbox>& mailbox,
                            SocketId socket);
  // Registers a fresh unique name ("lo-<n>").
  Port bind_unique(const std::shared_ptr<Mailbox>& mailbox, SocketId socket);
  void unbind(const std::string& name);
  common::Result<Port> resolve(const std::string& name);
  // Drops everything to and from the endpoint that owns `name` (all its sockets) while set.
  common::Result<void> set_partitioned(const std::string& name, bool partitioned);

 private:
  Fabric() = default;
  std::mutex mutex_;
  std::unordered_map<std::string, Port> ports_;
  uint64_t next_unique_ = 0;
};

}  // namespace detwan::transport::loopback
