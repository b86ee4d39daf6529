#pragma once
// A tcp channel: length-framed messages over one established (hello-exchanged) TCP socket.
//
// All socket work happens on the endpoint's progress thread; the public calls post to it.
// Semantics specific to this backend (see transport.h for the common contract):
//  * send completion means "written to the local socket": TCP gives no end-to-end
//    acknowledgement of application data, so a message completed just before the peer dies
//    may still be lost. This is the tcp backend's documented, weaker guarantee.
//  * Messages already received when the peer closes gracefully are still delivered, then
//    every further receive fails with kUnavailable.
//  * Authenticated channels (hello.mode != kNone): every message goes as sealed records
//    (wire.h); a record whose tag does not verify fails the channel at once (kIo, "failed
//    authentication"), counted dropped_auth: nothing of it is delivered.
//  * Reading pauses while more than the receive window (recv_window_bytes, 0 = 4 MiB) of
//    messages wait for recv_async, so a slow reader pushes back on the sender through TCP.
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "transport/tcp/io_thread.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace detwan::transport::tcp {

class ChannelCore;

class TcpChannel final : public Channel {
 public:
  // `socket` has completed the hello exchange; `hello` is its outcome: the peer's limit
  // (max_message_bytes) and, on an authenticated channel, the mode and this side's keys.
  TcpChannel(std::shared_ptr<IoThread> io, boost::asio::ip::tcp::socket socket,
             const ChannelOptions& options, const Hello& hello);
  ~TcpChannel() override;

  void send_async(std::span<const std::byte> message, SendCallback done) override;
  void recv_async(RecvCallback done) override;
  [[nodiscard]] ChannelStats stats() const override;
  void close() override;
  [[nodiscard]] std::string describe() const override;

 private:
  std::shared_ptr<IoThread> io_;  // declared first: destroyed last, after core_'s close posts
  std::shared_ptr<ChannelCore> core_;
};

}  // namespace detwan::transport::tcp
