#pragma once
// Setup of one shm connection: the Unix socket handshake, the shared memfd and the eventfds.
// Setup tier: these calls may block (bounded by a deadline) and return Result naming the
// problem.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "transport/shm/layout.h"

namespace detwan::transport::shm {

using common::Result;
using common::UniqueFd;

// RAII owner of a shared mapping.
class SharedMapping {
 public:
  SharedMapping() = default;
  SharedMapping(void* address, size_t bytes) : address_(address), bytes_(bytes) {}
  ~SharedMapping() { reset(); }
  SharedMapping(SharedMapping&& other) noexcept;
  SharedMapping& operator=(SharedMapping&& other) noexcept;
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  void reset();
  [[nodiscard]] std::byte* data() const { return static_cast<std::byte*>(address_); }
  [[nodiscard]] size_t bytes() const { return bytes_; }

 private:
  void* address_ = nullptr;
  size_t bytes_ = 0;
};

// Everything one side owns for one connection after the handshake.
struct Session {
  int side = kClientSide;
  UniqueFd socket;         // stays open for the channel's life: hang-up = peer gone
  UniqueFd own_doorbell;   // eventfd the peer writes to wake this side
  UniqueFd peer_doorbell;  // eventfd this side writes to wake the peer
  SharedMapping mapping;
  uint64_t ring_bytes = 0;
  uint64_t peer_max_message_bytes = 0;  // 0 = not known yet (the client learns it later)
  std::string name;                     // listener name, for describe()

  [[nodiscard]] SharedControl* control() const {
    return reinterpret_cast<SharedControl*>(mapping.data());
  }
  [[nodiscard]] std::byte* ring_data(int ring) const {
    return mapping.data() + kControlBytes + static_cast<size_t>(ring) * ring_bytes;
  }
};

// Only peers of this process's effective uid share memory with it, whatever the endpoint's
// Security mode: SO_PEERCRED of the connected Unix socket. kUnavailable naming the peer's uid
// and pid otherwise. `role`: "a peer of" (server side) or "the listener of" (client side).
Result<void> check_peer_uid(int fd, const std::string& name, const char* role);

// "\0detwan-shm-<name>" (abstract namespace, no file system entry). Names are 1..64 characters
// of [A-Za-z0-9._-].
Result<void> validate_name(const std::string& name);

// Binds and listens on `name`; an empty name picks a unique one (written back to `name`).
Result<UniqueFd> listen_socket(std::string& name);

// Client side: connects to `name`, creates and maps the memfd (kControlBytes + 2 x ring_bytes,
// sealed against resizing), creates both eventfds and sends the Hello with the fds.
// Does not wait for the server to accept: the rings are usable at once.
Result<Session> client_handshake(const std::string& name, uint64_t ring_bytes,
                                 uint64_t max_message_bytes, int64_t timeout_ns);

// Server side: receives and validates the Hello and its fds on an accepted socket (waits until
// CLOCK_MONOTONIC `deadline_ns`), maps the memfd, announces `max_message_bytes`.
Result<Session> server_handshake(UniqueFd socket, const std::string& name,
                                 uint64_t max_message_bytes, int64_t deadline_ns);

}  // namespace detwan::transport::shm
