#pragma once
// Kernel socket options of a tcp channel, derived from its ChannelOptions.
//
//   TCP_NODELAY        on: messages are flushed as written, no Nagle delay on small ones.
//   SO_KEEPALIVE       on, probing every keepalive_interval_ns (rounded up to whole seconds,
//                      the kernel's unit; minimum 1 s) after as long idle;
//   TCP_USER_TIMEOUT   peer_timeout_ns (ms): data or keepalive probes unacknowledged for this
//                      long fail the socket with ETIMEDOUT -> the channel fails with kTimeout.
// Together a peer that vanishes (no FIN, no RST) fails the channel within about
// peer_timeout_ns whether or not data is in flight.
#include <boost/asio/ip/tcp.hpp>

#include "common/status.h"
#include "transport/transport.h"

namespace detwan::transport::tcp {

common::Result<void> apply_socket_options(boost::asio::ip::tcp::socket& socket,
                                          const ChannelOptions& options);

}  // namespace detwan::transport::tcp
