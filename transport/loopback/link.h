#pragma once
// The loopback backend's packet I/O (satisfies datagram::DatagramLink): sockets are names on
// the process-wide Fabric, sends go straight into the destination endpoint's Mailbox with the
// sender's faults (faults.h) applied, in real time: delay, jitter and rate postpone a datagram's
// delivery time; loss, duplication, corruption and reordering are drawn from a seeded RNG.
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "transport/datagram/link.h"
#include "transport/loopback/fabric.h"
#include "transport/loopback/faults.h"

namespace detwan::transport::loopback {

struct LinkCounters {
  uint64_t sent = 0;               // datagrams handed to send()
  uint64_t delivered = 0;          // datagrams taken by receive() (duplicates included)
  uint64_t dropped_loss = 0;
  uint64_t dropped_partition = 0;  // to or from a partitioned endpoint
  uint64_t dropped_no_route = 0;   // destination endpoint gone
  uint64_t dropped_queue = 0;      // rate backlog above kMaxBacklogNs or receiver mailbox full
  uint64_t duplicated = 0;
  uint64_t corrupted = 0;
  uint64_t reordered = 0;
};

class LoopbackLink {
 public:
  using Address = Port;
  // A datagram that would wait longer than this behind the rate limiter is dropped.
  static constexpr int64_t kMaxBacklogNs = 200'000'000;
  static constexpr size_t kMaxDatagramBytes = 65535;

  explicit LoopbackLink(const FaultConfig& faults);
  ~LoopbackLink();
  LoopbackLink(const LoopbackLink&) = delete;
  LoopbackLink& operator=(const LoopbackLink&) = delete;

  // ---- setup ----
  // "" picks a unique name.
  common::Result<std::pair<SocketId, std::string>> open_listen(const std::string& address);
  // Every path of a loopback channel goes to the connect() address (PathSpec.remote is
  // ignored); path.local, if given, names the socket.
  common::Result<std::pair<SocketId, Port>> open_path(const PathSpec& path,
                                                      const std::string& connect_address);
  void close_socket(SocketId socket);
  [[nodiscard]] std::string format(const Port& port) const { return port.name ? *port.name : "?"; }
  [[nodiscard]] std::string local_name(SocketId socket) const;
  static bool same(const Port& a, const Port& b) {
    return a.identity == b.identity && a.socket == b.socket;
  }

  [[nodiscard]] size_t max_datagram_bytes() const { return kMaxDatagramBytes; }

  // ---- datapath ----
  std::span<std::byte> tx_buffer() { return tx_buffer_; }
  common::Status send(SocketId socket, const Port& destination, size_t size_bytes);
  void flush() {}
  template <typename Fn>
  void receive(int64_t deadline_ns, Fn&& fn) {
    mailbox_->take_due(deadline_ns, inbound_);
    const bool partitioned = mailbox_->partitioned.load(std::memory_order_acquire);
    for (Inbound& datagram : inbound_) {
      if (partitioned || datagram.socket >= sockets_.size() || !sockets_[datagram.socket].open) {
        ++counters_.dropped_partition;
        continue;
      }
      ++counters_.delivered;
      fn(datagram.socket, datagram.source, std::span<const std::byte>(datagram.bytes));
    }
    inbound_.clear();
  }
  void wake() { mailbox_->wake(); }
  void shutdown() {}

  [[nodiscard]] const LinkCounters& counters() const { return counters_; }

 private:
  struct Socket {
    Port port;
    bool open = false;
  };
  SocketId add_socket(Port port);
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(random_); }

  FaultConfig faults_;
  std::shared_ptr<Mailbox> mailbox_;
  std::vector<Socket> sockets_;
  std::vector<std::byte> tx_buffer_;
  std::vector<Inbound> inbound_;
  std::mt19937_64 random_;
  common::MonotonicClock clock_;
  int64_t next_free_ns_ = 0;  // rate limiter: when the sender's link is free again
  LinkCounters counters_;
};

static_assert(datagram::DatagramLink<LoopbackLink>);

}  // namespace detwan::transport::loopback
