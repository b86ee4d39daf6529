#pragma once
// The udp backend's packet I/O (satisfies datagram::DatagramLink) on one io_uring:
//  - every socket has ONE multishot recvmsg in flight that fills buffers from its own provided
//    buffer ring (kRecvBuffersPerSocket buffers); a buffer goes back to the ring as soon as the
//    driver has consumed its datagram. (One recvmsg per buffer instead would wake every waiting
//    request per datagram, and io_uring punts the losers to io-wq worker threads: a thundering
//    herd that costs ~100 us per hop on a loaded machine.)
//  - sends take a buffer from a fixed pool and are prepared as sendmsg SQEs, submitted in one
//    batch by flush() or, in the same system call as its wait, by receive();
//  - UDP GSO: consecutive sends from one socket to one destination with one size (the last may
//    be shorter) share ONE sendmsg with a UDP_SEGMENT control message, up to kMaxGsoSegments
//    datagrams and kMaxGsoBytes; the kernel (or the NIC) cuts them into datagrams. A batch the
//    route refuses as a whole (-EIO: no checksum offload on older kernels; -EMSGSIZE/-EINVAL:
//    a segment over the route's MTU, which alone would be fragmented) turns GSO off for that
//    socket and is sent again datagram by datagram, so nothing is lost;
//  - UDP GRO: the kernel may hand one buffer holding several datagrams of one flow plus their
//    size (a UDP_GRO control message); receive() calls fn once per datagram. GRO sockets get
//    buffers of kGroBufferBytes (a coalesced buffer is at most 64 KiB);
//  - posted API calls wake the loop through an eventfd whose read is always armed in the ring,
//    so receive() is one io_uring_submit_and_wait_timeout() bounded by the driver's next timer;
//  - optional busy polling (set_busy_poll_ns, backend_config "busy_poll_us=N"): before it
//    sleeps, receive() keeps asking the kernel for completions for up to N ns (one non-blocking
//    io_uring_enter each, which also runs the deferred completion work), trading a spinning
//    core for the scheduler's sleep/wakeup latency on each hop; "busy_poll_us=auto"
//    (set_adaptive_busy_poll) spins only while it pays and steps aside on a contended core
//    (busy_poll.h);
//  - the ring is SINGLE_ISSUER + DEFER_TASKRUN (completion work runs only when the progress
//    thread waits: no interrupting task work), created disabled and enabled by the first thread
//    that uses it, so the endpoint's progress thread becomes its only submitter.
// Setup in link.cc, the per-packet path in link_datapath.cc.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <liburing.h>
#include <netinet/in.h>

#include "common/status.h"
#include "common/unique_fd.h"
#include "transport/datagram/link.h"
#include "transport/udp/busy_poll.h"
#include "transport/udp/socket.h"

namespace detwan::transport::udp {

using datagram::SocketId;

struct LinkCounters {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t send_errors = 0;        // sendmsg failed (EMSGSIZE, ENETUNREACH, ...)
  uint64_t recv_errors = 0;
  uint64_t dropped_truncated = 0;  // datagram larger than kMaxDatagramBytes
  uint64_t recv_rearmed = 0;       // multishot receive ended (buffer ring empty) and was re-armed
  uint64_t dropped_no_sqe = 0;     // submission queue full even after a submit
  uint64_t dropped_closed = 0;     // send on a closed socket
  uint64_t busy_polls_found = 0;   // waits a busy poll ended without sleeping
  uint64_t busy_polls_stepped_aside = 0;  // adaptive: spinning paused (load, preempted spin)
  uint64_t gso_sends = 0;                 // sendmsg calls that carried more than one datagram
  uint64_t gso_datagrams = 0;             // datagrams sent in them
  uint64_t gso_refused = 0;               // GSO sends refused by the route (GSO then off)
  uint64_t gro_buffers = 0;               // received buffers holding more than one datagram
  uint64_t gro_datagrams = 0;             // datagrams in them
};

// What the link asks of the kernel (backend_config "gso=0", "gro=0" turn them off).
struct LinkOptions {
  bool gso = true;
  bool gro = true;
  // > 1: this link is one of that many lanes sharing each listen address (lanes.h): its listen
  // socket joins the address's SO_REUSEPORT group, steered by connection id.
  uint32_t listen_lanes = 1;
};

class UdpLink {
 public:
  using Address = UdpAddress;
  // Jumbo frames (9000 - 28) fit; ChannelOptions.mtu_bytes is limited to this + 28.
  static constexpr size_t kMaxDatagramBytes = 9216;
  static constexpr uint32_t kRecvBuffersPerSocket = 128;  // power of two (buffer ring)
  static constexpr uint32_t kGroBuffersPerSocket = 64;    // of kGroBufferBytes each
  static constexpr uint32_t kSendBuffers = 512;
  static constexpr unsigned kRingEntries = 1024;
  static constexpr uint32_t kMaxGsoSegments = 64;  // the kernel's UDP_MAX_SEGMENTS
  static constexpr uint32_t kMaxGsoBytes = 65000;  // under IPv4's 65,507-byte UDP payload limit

  static common::Result<std::unique_ptr<UdpLink>> create(LinkOptions options = {});
  ~UdpLink();
  UdpLink(const UdpLink&) = delete;
  UdpLink& operator=(const UdpLink&) = delete;

  // ---- setup ----
  common::Result<std::pair<SocketId, std::string>> open_listen(const std::string& address);
  common::Result<std::pair<SocketId, UdpAddress>> open_path(const PathSpec& path,
                                                            const std::string& connect_address);
  void close_socket(SocketId socket);
  [[nodiscard]] std::string format(const UdpAddress& address) const { return format_address(address); }
  [[nodiscard]] std::string local_name(SocketId socket) const;
  static bool same(const UdpAddress& a, const UdpAddress& b) { return same_address(a, b); }
  [[nodiscard]] size_t max_datagram_bytes() const { return kMaxDatagramBytes; }

  // ---- datapath (link_datapath.cc) ----
  std::span<std::byte> tx_buffer();
  common::Status send(SocketId socket, const UdpAddress& destination, size_t size_bytes);
  void flush();
  template <typename Fn>
  void receive(int64_t deadline_ns, Fn&& fn) {
    reap(deadline_ns);
    for (const Received& received : received_) {
      fn(received.socket, received.source, received.payload);
      if (received.last_of_buffer) recycle(received.socket, received.buffer);
    }
    received_.clear();
    rearm_receives();
  }
  void wake();
  // Spin up to `busy_poll_ns` (0 = never) for completions before each sleep. Setup tier: call
  // before the progress thread starts using the link.
  void set_busy_poll_ns(int64_t busy_poll_ns) { busy_poll_ns_ = busy_poll_ns; }
  // Adaptive busy polling of at most `max_ns` per wait (AdaptiveBusyPoll). Setup tier.
  void set_adaptive_busy_poll(int64_t max_ns);
  // Cancels and drains every operation in flight (bounded); called on the progress thread, the
  // ring's single issuer. The destructor does it too if nobody did.
  void shutdown();

  [[nodiscard]] const LinkCounters& counters() const { return counters_; }
  // Whether sends of `socket` may still be batched with UDP_SEGMENT, and whether it has UDP_GRO.
  [[nodiscard]] bool socket_gso(SocketId socket) const {
    return socket < sockets_.size() && sockets_[socket] && sockets_[socket]->gso;
  }
  [[nodiscard]] bool socket_gro(SocketId socket) const {
    return socket < sockets_.size() && sockets_[socket] && sockets_[socket]->gro;
  }

 private:
  // One sendmsg being filled or in flight: one datagram, or up to kMaxGsoSegments of
  // segment_bytes each (the last may be shorter) that the kernel segments (UDP_SEGMENT).
  struct TxBatch {
    msghdr message{};
    UdpAddress destination;
    SocketId socket = 0;
    uint32_t count = 0;
    uint32_t segment_bytes = 0;
    uint32_t total_bytes = 0;
    alignas(cmsghdr) std::byte control[CMSG_SPACE(sizeof(uint16_t))]{};
    iovec vectors[kMaxGsoSegments]{};
    uint32_t buffers[kMaxGsoSegments]{};
  };
  static constexpr uint32_t kNoBatch = UINT32_MAX;
  // A socket and its provided-buffer ring. Buffer layout (io_uring multishot recvmsg):
  // [io_uring_recvmsg_out][source address: sizeof(sockaddr_storage)][payload].
  struct Socket {
    Socket() = default;
    ~Socket();
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    common::UniqueFd fd;
    UdpAddress local;
    uint16_t group = 0;                   // buffer group id
    io_uring_buf_ring* buffer_ring = nullptr;
    size_t buffer_ring_bytes = 0;         // mmap'ed
    std::unique_ptr<std::byte[]> memory;  // kRecvBuffersPerSocket x kRecvBufferBytes
    msghdr receive_template{};
    uint32_t buffer_count = 0;  // in the ring (power of two)
    size_t buffer_bytes = 0;    // each
    bool gso = false;           // sends may be batched with UDP_SEGMENT
    bool gro = false;           // UDP_GRO is on: a buffer may hold several datagrams
    uint32_t inflight = 0;  // the multishot receive (while armed) and sends the kernel holds
    bool receive_armed = false;
    bool registered = false;
    bool closing = false;
  };
  struct Received {
    SocketId socket;
    uint16_t buffer;
    bool last_of_buffer;  // the buffer goes back to the ring after this datagram
    UdpAddress source;
    std::span<const std::byte> payload;
  };
  // [io_uring_recvmsg_out][source address][control: the UDP_GRO size][payload]
  static constexpr size_t kControlBytes = CMSG_SPACE(sizeof(int));
  static constexpr size_t kRecvBufferBytes =
      sizeof(io_uring_recvmsg_out) + sizeof(sockaddr_storage) + kControlBytes + kMaxDatagramBytes;
  static constexpr size_t kGroBufferBytes =
      sizeof(io_uring_recvmsg_out) + sizeof(sockaddr_storage) + kControlBytes + 65536;

  explicit UdpLink(LinkOptions options) : options_(options) {}
  common::Result<SocketId> add_socket(const UdpAddress& local, std::string_view what,
                                      bool reuse_port = false);
  void ensure_started();
  io_uring_sqe* get_sqe();
  void arm_recv(SocketId socket);
  void rearm_receives();
  void recycle(SocketId socket, uint16_t buffer);
  void on_receive(SocketId socket, const io_uring_cqe& cqe);
  void release_socket(SocketId socket);  // unregisters the buffer ring, frees, closes the fd
  // Whether a datagram of size_bytes from `socket` to `destination` may join the open batch.
  bool joins_batch(SocketId socket, const UdpAddress& destination, size_t size_bytes) const;
  // Prepares the open batch's sendmsg (nothing open: nothing to do).
  void close_batch();
  void free_batch(uint32_t index);
  // A GSO send the route refused: GSO off for the socket, each datagram sent on its own.
  void resend_one_by_one(uint32_t index);
  void arm_wake();
  // Adaptive busy poll: tells it how many threads are runnable now (/proc/loadavg).
  void sample_load(int64_t now_ns);
  void reap(int64_t deadline_ns);
  void complete(const io_uring_cqe& cqe);
  void put_socket(SocketId socket);  // one operation on it finished

  io_uring ring_{};
  bool ring_ready_ = false;
  common::UniqueFd wake_fd_;
  uint64_t wake_value_ = 0;
  std::vector<std::unique_ptr<Socket>> sockets_;  // by SocketId; null once closed and drained
  std::unique_ptr<std::byte[]> tx_memory_;        // kSendBuffers x kMaxDatagramBytes
  std::vector<TxBatch> tx_batches_;               // kSendBuffers + 1 (see create())
  std::vector<uint32_t> tx_batch_free_;
  uint32_t open_batch_ = kNoBatch;  // filled by send(), prepared by close_batch()
  std::vector<uint32_t> tx_free_;
  std::vector<Received> received_;
  std::vector<uint16_t> free_groups_;
  uint16_t next_group_ = 1;
  LinkOptions options_;
  int64_t busy_poll_ns_ = 0;
  std::optional<AdaptiveBusyPoll> adaptive_;
  common::UniqueFd loadavg_fd_;  // /proc/loadavg, sampled by the adaptive busy poll
  int64_t online_cpus_ = 1;
  int64_t next_load_sample_ns_ = 0;
  uint32_t inflight_ = 0;  // every operation in flight, wake read included
  bool shutting_down_ = false;
  bool wake_armed_ = false;
  bool rearm_needed_ = false;
  bool started_ = false;
  bool shut_down_ = false;  // ring enabled by (and bound to) the thread that first used it
  LinkCounters counters_;
};

static_assert(datagram::DatagramLink<UdpLink>);

}  // namespace detwan::transport::udp
