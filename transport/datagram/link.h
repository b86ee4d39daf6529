#pragma once
// The packet I/O a datagram backend gives the driver (transport/datagram/driver.h). The udp
// backend (io_uring sockets) and the loopback backend (in-memory fabric) implement it; the
// driver's protocol logic is written once against this concept, with no virtual call per packet.
//
// Threading: a Link belongs to its endpoint's progress thread. Only `wake()` may be called from
// any thread (it interrupts a `receive()` in progress or makes the next one return at once).
//
// Sockets: a link owns any number of sockets, named by a SocketId. The driver opens one listen
// socket per endpoint (server side) and one socket per path of each connect()ed channel.
// Setup calls return Result and may allocate; the datapath calls never throw, never allocate for
// an error, and count what they drop.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "common/status.h"
#include "transport/transport.h"

namespace detwan::transport::datagram {

using SocketId = uint32_t;

template <typename L>
concept DatagramLink = requires(L& link, const L& const_link, SocketId socket,
                                const typename L::Address& address, const PathSpec& path,
                                const std::string& text, size_t size_bytes, int64_t deadline_ns) {
  typename L::Address;  // copyable peer address (udp: sockaddr; loopback: fabric port)
  // ---- setup (progress thread) ----
  // Opens the listen socket; returns it and the bound address in the form connect() accepts.
  { link.open_listen(text) } -> std::same_as<common::Result<std::pair<SocketId, std::string>>>;
  // Opens the socket of one client path: bound to path.local if given, talking to path.remote
  // (or `text`, the connect() address, when path.remote is empty).
  { link.open_path(path, text) } -> std::same_as<common::Result<std::pair<SocketId, typename L::Address>>>;
  { link.close_socket(socket) } -> std::same_as<void>;
  { const_link.format(address) } -> std::same_as<std::string>;
  { const_link.local_name(socket) } -> std::same_as<std::string>;
  { L::same(address, address) } -> std::same_as<bool>;
  // Largest datagram the link sends and receives (the driver refuses larger mtu_bytes - 28).
  { const_link.max_datagram_bytes() } -> std::same_as<size_t>;
  // ---- datapath (progress thread) ----
  // A buffer for the next datagram to send (at least max_datagram_bytes()); empty when every
  // send buffer is in flight ("busy": the link wakes receive() when one comes back).
  { link.tx_buffer() } -> std::same_as<std::span<std::byte>>;
  // Sends the first size_bytes of the last tx_buffer() from `socket` to `address`. May only be
  // queued until flush(). Failures are counted by the link.
  { link.send(socket, address, size_bytes) } -> std::same_as<common::Status>;
  { link.flush() } -> std::same_as<void>;
  // First flushes what send() queued (the driver relies on this: it calls flush() only when
  // no receive() follows). Then waits until datagrams arrived, wake() was called or
  // CLOCK_MONOTONIC reached deadline_ns (<= now: do not wait), then calls
  // fn(socket, source, bytes) for each received datagram.
  { link.receive(deadline_ns, [](SocketId, const typename L::Address&, std::span<const std::byte>) {}) }
      -> std::same_as<void>;
  // Last call on the progress thread: stops every operation in flight (the link may own kernel
  // state tied to this thread).
  { link.shutdown() } -> std::same_as<void>;
  // ---- any thread ----
  { link.wake() } -> std::same_as<void>;
};

}  // namespace detwan::transport::datagram
