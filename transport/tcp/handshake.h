#pragma once
// Connection setup on the progress thread: optional TCP connect, then the hello exchange
// (transport/tcp/wire.h) under one deadline. Both sides send their hello at once and wait for
// the peer's, so setup costs one round trip after the TCP handshake.
#include <functional>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "common/status.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace detwan::transport::tcp {

// Called once, on the progress thread, with the peer's validated hello and the socket (open
// and ready for a TcpChannel), or with an error naming the peer and the problem (the socket
// is then the callee's to close). Errors: kTimeout (deadline), kUnavailable (refused/closed),
// kInvalidArgument (bad hello: magic, version), kIo (other socket errors).
using HandshakeDone = std::function<void(Result<Hello>, boost::asio::ip::tcp::socket)>;

// Connects `socket` (unopened) to one of `targets`, applies the channel's socket options and
// exchanges hellos. `peer_name` is used in error messages ("127.0.0.1:5000").
void start_client_handshake(boost::asio::ip::tcp::socket socket,
                            boost::asio::ip::tcp::resolver::results_type targets,
                            const ChannelOptions& options, int64_t timeout_ns,
                            std::string peer_name, HandshakeDone done);

// Exchanges hellos on an accepted socket (socket options already applied).
void start_server_handshake(boost::asio::ip::tcp::socket socket, const ChannelOptions& options,
                            int64_t timeout_ns, HandshakeDone done);

}  // namespace detwan::transport::tcp
