// Setup of the udp backend's io_uring link: the ring, the wake eventfd, sockets and their
// receive buffers, and the orderly drain on destruction.
#include "transport/udp/link.h"

#include "transport/udp/lane_steering.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/udp.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"

namespace detwan::transport::udp {

common::Result<std::unique_ptr<UdpLink>> UdpLink::create(LinkOptions options) {
  std::unique_ptr<UdpLink> link(new UdpLink(options));
  int status = io_uring_queue_init(
      kRingEntries, &link->ring_,
      IORING_SETUP_R_DISABLED | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
  if (status == -EINVAL) {
    // Kernel before 6.1: a plain ring, usable from any thread at once.
    status = io_uring_queue_init(kRingEntries, &link->ring_, 0);
    link->started_ = status >= 0;
  }
  if (status < 0) {
    return common::make_error(common::ErrorCode::kUnavailable,
                              fmt::format("udp: io_uring_queue_init: {}", std::strerror(-status)));
  }
  link->ring_ready_ = true;
  link->wake_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!link->wake_fd_.valid()) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("udp: eventfd: {}", std::strerror(errno)));
  }
  link->tx_memory_ = std::make_unique<std::byte[]>(size_t{kSendBuffers} * kMaxDatagramBytes);
  // One batch per buffer at worst, plus one: a refused GSO batch is dissolved into single
  // sends while it still holds its slot.
  link->tx_batches_.resize(kSendBuffers + 1);
  link->tx_batch_free_.reserve(kSendBuffers + 1);
  for (uint32_t i = kSendBuffers + 1; i > 0; --i) link->tx_batch_free_.push_back(i - 1);
  link->tx_free_.reserve(kSendBuffers);
  for (uint32_t i = kSendBuffers; i > 0; --i) link->tx_free_.push_back(i - 1);
  link->received_.reserve(size_t{kRingEntries} * 2);
  return link;  // the wake read is armed by the first reap (on the progress thread)
}

UdpLink::~UdpLink() {
  if (!ring_ready_) return;
  shutdown();
  io_uring_queue_exit(&ring_);
}

void UdpLink::shutdown() {
  if (!started_ || shut_down_) return;
  // The kernel writes into our buffers until each operation completes: cancel everything and
  // wait for the completions before the memory goes away (bounded: a stuck kernel operation
  // must not hang the process forever).
  for (SocketId id = 0; id < sockets_.size(); ++id) {
    if (sockets_[id] && !sockets_[id]->closing) close_socket(id);
  }
  shutting_down_ = true;
  if (wake_armed_) {
    if (io_uring_sqe* sqe = get_sqe()) {
      io_uring_prep_cancel_fd(sqe, wake_fd_.get(), IORING_ASYNC_CANCEL_ALL);
      io_uring_sqe_set_data64(sqe, 0);
    }
  }
  const common::MonotonicClock clock;
  const int64_t give_up_ns = clock.now_ns() + 2'000'000'000;
  while (inflight_ > 0 && clock.now_ns() < give_up_ns) reap(clock.now_ns() + 50'000'000);
  received_.clear();
  shut_down_ = true;
}

void UdpLink::ensure_started() {
  if (started_) return;
  started_ = true;
  // liburing 2.3 declares io_uring_enable_rings() but Debian's library does not export it.
  (void)::syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
}

UdpLink::Socket::~Socket() {
  if (buffer_ring != nullptr) ::munmap(buffer_ring, buffer_ring_bytes);
}

common::Result<SocketId> UdpLink::add_socket(const UdpAddress& local, std::string_view what,
                                             bool reuse_port) {
  ensure_started();
  auto bound = open_socket(local, what, reuse_port);
  if (!bound) return std::unexpected(bound.error());
  auto socket = std::make_unique<Socket>();
  socket->fd = std::move(bound->fd);
  socket->local = bound->local;
  // GSO: setting a zero default segment size succeeds where the kernel has UDP_SEGMENT (4.18);
  // whether a route's device can segment shows only on the first batch (see resend_one_by_one).
  const int zero = 0;
  socket->gso =
      options_.gso && ::setsockopt(socket->fd.get(), SOL_UDP, UDP_SEGMENT, &zero, sizeof zero) == 0;
  const int one = 1;
  socket->gro =
      options_.gro && ::setsockopt(socket->fd.get(), SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
  socket->buffer_count = socket->gro ? kGroBuffersPerSocket : kRecvBuffersPerSocket;
  socket->buffer_bytes = socket->gro ? kGroBufferBytes : kRecvBufferBytes;
  if (free_groups_.empty() && next_group_ == UINT16_MAX) {
    return common::make_error(common::ErrorCode::kUnavailable, "udp: too many open sockets");
  }
  if (free_groups_.empty()) {
    socket->group = next_group_++;
  } else {
    socket->group = free_groups_.back();
    free_groups_.pop_back();
  }
  // The buffer ring must be page aligned: mmap it.
  socket->buffer_ring_bytes = size_t{socket->buffer_count} * sizeof(io_uring_buf);
  void* ring_memory = ::mmap(nullptr, socket->buffer_ring_bytes, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ring_memory == MAP_FAILED) {
    free_groups_.push_back(socket->group);
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("udp: mmap buffer ring: {}", std::strerror(errno)));
  }
  socket->buffer_ring = static_cast<io_uring_buf_ring*>(ring_memory);
  io_uring_buf_reg registration{};
  registration.ring_addr = reinterpret_cast<uint64_t>(ring_memory);
  registration.ring_entries = socket->buffer_count;
  registration.bgid = socket->group;
  const int status = io_uring_register_buf_ring(&ring_, &registration, 0);
  if (status != 0) {
    free_groups_.push_back(socket->group);
    return common::make_error(
        common::ErrorCode::kUnavailable,
        fmt::format("udp: io_uring_register_buf_ring: {} (kernel >= 5.19 needed)",
                    std::strerror(-status)));
  }
  socket->registered = true;
  // Not zeroed: the kernel writes what it hands back; pages are touched as buffers are used.
  socket->memory =
      std::make_unique_for_overwrite<std::byte[]>(socket->buffer_count * socket->buffer_bytes);
  io_uring_buf_ring_init(socket->buffer_ring);
  const int mask = io_uring_buf_ring_mask(socket->buffer_count);
  for (uint32_t i = 0; i < socket->buffer_count; ++i) {
    io_uring_buf_ring_add(socket->buffer_ring, socket->memory.get() + i * socket->buffer_bytes,
                          socket->buffer_bytes, static_cast<uint16_t>(i), mask,
                          static_cast<int>(i));
  }
  io_uring_buf_ring_advance(socket->buffer_ring, static_cast<int>(socket->buffer_count));
  // The template tells the kernel how much room the source address and the control messages
  // (the UDP_GRO segment size) get in each buffer.
  socket->receive_template.msg_namelen = sizeof(sockaddr_storage);
  socket->receive_template.msg_controllen = socket->gro ? kControlBytes : 0;
  const auto id = static_cast<SocketId>(sockets_.size());
  sockets_.push_back(std::move(socket));
  arm_recv(id);
  return id;
}

void UdpLink::release_socket(SocketId id) {
  Socket& socket = *sockets_[id];
  if (socket.registered) {
    (void)io_uring_unregister_buf_ring(&ring_, socket.group);
    free_groups_.push_back(socket.group);
  }
  sockets_[id].reset();  // frees the buffers and the ring, closes the fd
}

common::Result<std::pair<SocketId, std::string>> UdpLink::open_listen(const std::string& address) {
  auto local = parse_address(address);
  if (!local) return std::unexpected(local.error());
  const bool laned = options_.listen_lanes > 1;
  auto id = add_socket(*local, "listen socket", laned);
  if (!id) return std::unexpected(id.error());
  if (laned) {
    if (auto steered = attach_lane_steering(sockets_[*id]->fd.get(), options_.listen_lanes);
        !steered) {
      close_socket(*id);
      return std::unexpected(steered.error());
    }
  }
  return std::pair{*id, format_address(sockets_[*id]->local)};
}

common::Result<std::pair<SocketId, UdpAddress>> UdpLink::open_path(
    const PathSpec& path, const std::string& connect_address) {
  // "Through detwan-gw" is this same code: the remote is then the peer's tunnel-side address.
  auto remote = parse_address(path.remote.empty() ? connect_address : path.remote);
  if (!remote) return std::unexpected(remote.error());
  UdpAddress local = any_address(*remote);
  if (!path.local.empty()) {
    auto parsed = parse_address(path.local);
    if (!parsed) return std::unexpected(parsed.error());
    if (parsed->ipv6() != remote->ipv6()) {
      return common::make_error(
          common::ErrorCode::kInvalidArgument,
          fmt::format("udp path: local '{}' and remote '{}' are of different address families",
                      path.local, format_address(*remote)));
    }
    local = *parsed;
  }
  auto id = add_socket(local, "path socket");
  if (!id) return std::unexpected(id.error());
  return std::pair{*id, *remote};
}

void UdpLink::close_socket(SocketId id) {
  ensure_started();
  if (id >= sockets_.size() || !sockets_[id] || sockets_[id]->closing) return;
  // What send() gathered for this socket goes out first, as it did before the close.
  if (open_batch_ != kNoBatch && tx_batches_[open_batch_].socket == id) close_batch();
  Socket& socket = *sockets_[id];
  socket.closing = true;
  if (socket.inflight == 0) {
    release_socket(id);
    return;
  }
  if (io_uring_sqe* sqe = get_sqe()) {
    io_uring_prep_cancel_fd(sqe, socket.fd.get(), IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, 0);
  }
}

std::string UdpLink::local_name(SocketId id) const {
  if (id >= sockets_.size() || !sockets_[id]) return "?";
  return format_address(sockets_[id]->local);
}

void UdpLink::set_adaptive_busy_poll(int64_t max_ns) {
  adaptive_.emplace(max_ns);
  // Without /proc it only judges its own spins (preemption), never the host's load.
  loadavg_fd_.reset(::open("/proc/loadavg", O_RDONLY | O_CLOEXEC));
  online_cpus_ = std::max<int64_t>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
}

void UdpLink::wake() {
  const uint64_t one = 1;
  // EAGAIN only when the counter is saturated: the loop is awake anyway.
  (void)!::write(wake_fd_.get(), &one, sizeof one);
}

}  // namespace detwan::transport::udp
