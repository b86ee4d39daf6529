// Setup of shm connections: abstract Unix sockets, the sealed memfd and the fd passing.
#include "transport/shm/session.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"

namespace detwan::transport::shm {
namespace {

using common::ErrorCode;
using common::make_error;

inline constexpr size_t kMaxNameBytes = 64;
inline constexpr int kListenBacklog = 128;
inline constexpr std::string_view kAddressPrefix = "detwan-shm-";

std::string errno_text(int error) { return std::strerror(error); }

socklen_t make_address(const std::string& name, sockaddr_un& address) {
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, then the name without terminator.
  const std::string path = std::string(kAddressPrefix) + name;
  std::memcpy(address.sun_path + 1, path.data(), path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size());
}

uint64_t total_bytes(uint64_t ring_bytes) { return kControlBytes + 2 * ring_bytes; }

Result<void> validate_ring_bytes(uint64_t ring_bytes) {
  if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("shm: ring_bytes {} out of range [{}, {}]", ring_bytes,
                                  kMinRingBytes, kMaxRingBytes));
  }
  return {};
}

Result<void> set_nonblocking(int fd, const char* what) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return make_error(ErrorCode::kIo,
                      fmt::format("shm: fcntl(O_NONBLOCK) on the {}: {}", what, errno_text(errno)));
  }
  return {};
}

// A hostile client could pass any fd as a "doorbell"; only eventfds are accepted. Skipped when
// /proc is not mounted (the fd is still made non-blocking, so it cannot stall the thread).
Result<void> check_eventfd(int fd, const char* what) {
  char link[64] = {};
  const std::string path = fmt::format("/proc/self/fd/{}", fd);
  const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
  if (n > 0 && std::string_view(link, static_cast<size_t>(n)) != "anon_inode:[eventfd]") {
    return make_error(ErrorCode::kIo, fmt::format("shm: hello: the {} is not an eventfd ({})", what,
                                                  std::string_view(link, static_cast<size_t>(n))));
  }
  return set_nonblocking(fd, what);
}

Result<SharedMapping> map_shared(int fd, uint64_t bytes) {
  void* address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    return make_error(ErrorCode::kIo,
                      fmt::format("shm: mmap of {} bytes: {}", bytes, errno_text(errno)));
  }
  return SharedMapping(address, bytes);
}

}  // namespace

SharedMapping::SharedMapping(SharedMapping&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

SharedMapping& SharedMapping::operator=(SharedMapping&& other) noexcept {
  if (this != &other) {
    reset();
    address_ = std::exchange(other.address_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void SharedMapping::reset() {
  if (address_ != nullptr) ::munmap(address_, bytes_);
  address_ = nullptr;
  bytes_ = 0;
}

Result<void> validate_name(const std::string& name) {
  const bool ok_chars = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
  if (name.empty() || name.size() > kMaxNameBytes || !ok_chars) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("shm: address '{}': expected a name of 1..{} characters "
                                  "[A-Za-z0-9._-]",
                                  name, kMaxNameBytes));
  }
  return {};
}

Result<UniqueFd> listen_socket(std::string& name) {
  const bool pick = name.empty();
  if (!pick) {
    if (auto ok = validate_name(name); !ok) return std::unexpected(ok.error());
  }
  std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    if (pick) {
      const uint64_t token = (uint64_t{entropy()} << 32) ^ entropy();
      name = fmt::format("p{}-{:012x}", ::getpid(), token & 0xffff'ffff'ffffULL);
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
      return make_error(ErrorCode::kIo, fmt::format("shm: socket(AF_UNIX): {}", errno_text(errno)));
    }
    sockaddr_un address{};
    const socklen_t length = make_address(name, address);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      const int error = errno;
      if (error == EADDRINUSE && pick) continue;
      return make_error(error == EADDRINUSE ? ErrorCode::kAlreadyExists : ErrorCode::kIo,
                        fmt::format("shm: bind '{}': {}", name, errno_text(error)));
    }
    if (::listen(fd.get(), kListenBacklog) != 0) {
      return make_error(ErrorCode::kIo,
                        fmt::format("shm: listen '{}': {}", name, errno_text(errno)));
    }
    return fd;
  }
  return make_error(ErrorCode::kIo, "shm: could not pick a free listener name in 16 attempts");
}

Result<Session> client_handshake(const std::string& name, uint64_t ring_bytes,
                                 uint64_t max_message_bytes, int64_t timeout_ns) {
  if (auto ok = validate_name(name); !ok) return std::unexpected(ok.error());
  if (auto ok = validate_ring_bytes(ring_bytes); !ok) return std::unexpected(ok.error());
  Session session;
  session.side = kClientSide;
  session.name = name;
  session.ring_bytes = ring_bytes;
  session.socket = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!session.socket.valid()) {
    return make_error(ErrorCode::kIo, fmt::format("shm: socket(AF_UNIX): {}", errno_text(errno)));
  }
  // Unix connect() and sendmsg() honour SO_SNDTIMEO (a full backlog blocks connect). A zero
  // timeval would mean "forever", so the timeout is at least 1 us.
  const int64_t timeout_us = std::max<int64_t>(timeout_ns / 1000, 1);
  const timeval send_timeout{static_cast<time_t>(timeout_us / 1'000'000),
                             static_cast<suseconds_t>(timeout_us % 1'000'000)};
  ::setsockopt(session.socket.get(), SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  sockaddr_un address{};
  const socklen_t length = make_address(name, address);
  if (::connect(session.socket.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int error = errno;
    if (error == ECONNREFUSED || error == ENOENT) {
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("shm: nobody listens on '{}' ({})", name, errno_text(error)));
    }
    if (error == EAGAIN || error == EINPROGRESS || error == ETIMEDOUT) {
      return make_error(
          ErrorCode::kTimeout,
          fmt::format("shm: connect to '{}': backlog full for {} ns", name, timeout_ns));
    }
    return make_error(ErrorCode::kIo,
                      fmt::format("shm: connect to '{}': {}", name, errno_text(error)));
  }
  // A listener of another user (a squatter on the name) gets nothing: no memory, no doorbells.
  if (auto ok = check_peer_uid(session.socket.get(), name, "the listener of"); !ok) {
    return std::unexpected(ok.error());
  }

  UniqueFd memfd(::memfd_create("detwan-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd.valid()) {
    return make_error(ErrorCode::kIo, fmt::format("shm: memfd_create: {}", errno_text(errno)));
  }
  const uint64_t bytes = total_bytes(ring_bytes);
  if (::ftruncate(memfd.get(), static_cast<off_t>(bytes)) != 0) {
    return make_error(ErrorCode::kIo, fmt::format("shm: ftruncate memfd to {} bytes: {}", bytes,
                                                  errno_text(errno)));
  }
  // Sealed so that neither side can shrink the file under the other's mapping (SIGBUS).
  if (::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return make_error(ErrorCode::kIo, fmt::format("shm: sealing the memfd: {}", errno_text(errno)));
  }
  auto mapping = map_shared(memfd.get(), bytes);
  if (!mapping) return std::unexpected(mapping.error());
  session.mapping = std::move(*mapping);
  SharedControl* control = session.control();
  control->magic = kMagic;
  control->version = kVersion;
  control->ring_bytes = ring_bytes;
  std::atomic_ref(control->sides[kClientSide].max_message_bytes)
      .store(max_message_bytes, std::memory_order_release);

  UniqueFd client_doorbell(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  UniqueFd server_doorbell(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!client_doorbell.valid() || !server_doorbell.valid()) {
    return make_error(ErrorCode::kIo, fmt::format("shm: eventfd: {}", errno_text(errno)));
  }

  Hello hello{kMagic, kVersion, kHelloFdCount, ring_bytes, max_message_bytes};
  iovec iov{&hello, sizeof(hello)};
  alignas(cmsghdr) char control_buffer[CMSG_SPACE(sizeof(int) * kHelloFdCount)] = {};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control_buffer;
  message.msg_controllen = sizeof(control_buffer);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * kHelloFdCount);
  const int fds[kHelloFdCount] = {memfd.get(), client_doorbell.get(), server_doorbell.get()};
  std::memcpy(CMSG_DATA(header), fds, sizeof(fds));
  if (::sendmsg(session.socket.get(), &message, MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof(hello))) {
    const int error = errno;
    return make_error(
        error == EPIPE || error == ECONNRESET ? ErrorCode::kUnavailable : ErrorCode::kIo,
        fmt::format("shm: sending the hello to '{}': {}", name, errno_text(error)));
  }
  if (auto ok = set_nonblocking(session.socket.get(), "socket"); !ok) {
    return std::unexpected(ok.error());
  }
  session.own_doorbell = std::move(client_doorbell);
  session.peer_doorbell = std::move(server_doorbell);
  return session;
}

Result<void> check_peer_uid(int fd, const std::string& name, const char* role) {
  ucred peer{};
  socklen_t length = sizeof(peer);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
    return make_error(ErrorCode::kIo, fmt::format("shm: SO_PEERCRED on '{}': {}", name,
                                                  errno_text(errno)));
  }
  const uid_t own = ::geteuid();
  if (peer.uid != own) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("shm: refused {} '{}': uid {} (pid {}); the shm backend admits "
                                  "only processes of this job's uid {}",
                                  role, name, peer.uid, peer.pid, own));
  }
  return {};
}

Result<Session> server_handshake(UniqueFd socket, const std::string& name,
                                 uint64_t max_message_bytes, int64_t deadline_ns) {
  const common::MonotonicClock clock;
  pollfd waiter{socket.get(), POLLIN, 0};
  for (;;) {
    const int64_t left_ns = deadline_ns - clock.now_ns();
    if (left_ns <= 0) {
      return make_error(ErrorCode::kTimeout,
                        fmt::format("shm: a peer connected to '{}' but sent no hello", name));
    }
    const timespec wait{static_cast<time_t>(left_ns / 1'000'000'000),
                        static_cast<long>(left_ns % 1'000'000'000)};
    const int ready = ::ppoll(&waiter, 1, &wait, nullptr);
    if (ready > 0) break;
    if (ready < 0 && errno != EINTR) {
      return make_error(ErrorCode::kIo, fmt::format("shm: poll: {}", errno_text(errno)));
    }
  }

  Hello hello{};
  iovec iov{&hello, sizeof(hello)};
  // Room for more fds than expected, so that extra ones are received (and closed), not lost.
  alignas(cmsghdr) char control_buffer[CMSG_SPACE(sizeof(int) * 8)] = {};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control_buffer;
  message.msg_controllen = sizeof(control_buffer);
  const ssize_t n = ::recvmsg(socket.get(), &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  const int error = errno;
  std::vector<UniqueFd> fds;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  if (n < 0) {
    return make_error(ErrorCode::kIo,
                      fmt::format("shm: receiving the hello: {}", errno_text(error)));
  }
  if (n == 0) {
    return make_error(ErrorCode::kUnavailable, "shm: the peer closed before its hello");
  }
  if (static_cast<size_t>(n) != sizeof(hello) || (message.msg_flags & MSG_TRUNC) != 0) {
    return make_error(ErrorCode::kIo, fmt::format("shm: malformed hello: {} bytes (expected {})", n,
                                                  sizeof(hello)));
  }
  if (hello.magic != kMagic) {
    return make_error(ErrorCode::kIo, fmt::format("shm: hello: bad magic {:#018x} (not a detwan "
                                                  "shm client)",
                                                  hello.magic));
  }
  if (hello.version != kVersion) {
    return make_error(ErrorCode::kIo, fmt::format("shm: hello: unsupported version {} (this "
                                                  "side speaks {})",
                                                  hello.version, kVersion));
  }
  if ((message.msg_flags & MSG_CTRUNC) != 0 || fds.size() != kHelloFdCount ||
      hello.fd_count != kHelloFdCount) {
    return make_error(ErrorCode::kIo, fmt::format("shm: hello: expected {} fds, got {}",
                                                  kHelloFdCount, fds.size()));
  }
  if (auto ok = validate_ring_bytes(hello.ring_bytes); !ok) return std::unexpected(ok.error());
  const uint64_t bytes = total_bytes(hello.ring_bytes);
  struct stat info {};
  if (::fstat(fds[0].get(), &info) != 0 || !S_ISREG(info.st_mode) ||
      static_cast<uint64_t>(info.st_size) < bytes) {
    return make_error(ErrorCode::kIo, fmt::format("shm: hello: the memory fd is not a file of "
                                                  "at least {} bytes",
                                                  bytes));
  }
  const int seals = ::fcntl(fds[0].get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return make_error(ErrorCode::kIo, "shm: hello: the memfd is not sealed against shrinking");
  }
  if (auto ok = check_eventfd(fds[1].get(), "client eventfd"); !ok)
    return std::unexpected(ok.error());
  if (auto ok = check_eventfd(fds[2].get(), "server eventfd"); !ok)
    return std::unexpected(ok.error());
  if (auto ok = set_nonblocking(socket.get(), "socket"); !ok) return std::unexpected(ok.error());

  Session session;
  session.side = kServerSide;
  session.name = name;
  session.ring_bytes = hello.ring_bytes;
  session.peer_max_message_bytes = hello.max_message_bytes;
  auto mapping = map_shared(fds[0].get(), bytes);
  if (!mapping) return std::unexpected(mapping.error());
  session.mapping = std::move(*mapping);
  std::atomic_ref(session.control()->sides[kServerSide].max_message_bytes)
      .store(max_message_bytes, std::memory_order_release);
  session.socket = std::move(socket);
  session.own_doorbell = std::move(fds[2]);
  session.peer_doorbell = std::move(fds[1]);
  return session;
}

}  // namespace detwan::transport::shm
