#pragma once
// The tcp backend's Endpoint (created through make_endpoint("tcp"); this header exists for
// tests and tools that want the backend's own counters).
//
// One io_context and one progress thread per endpoint, shared with the channels it creates.
// listen("host:port") binds (port 0 picks one) and returns "host:actualport"; accepted
// connections complete the hello exchange on the progress thread and wait in a queue for
// accept(). A peer whose hello is invalid (wrong magic or version) is logged, counted in
// handshakes_rejected() and dropped; it never reaches accept().
//
// listen/accept/connect block (setup tier) and must not be called from a channel callback.
// listen() and accept() are not meant to race each other (set up, then accept).
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "transport/tcp/io_thread.h"
#include "transport/transport.h"

namespace detwan::transport::tcp {

class Listener;
class TcpKeyring;

class TcpEndpoint final : public Endpoint {
 public:
  explicit TcpEndpoint(const EndpointOptions& options);
  ~TcpEndpoint() override;

  Result<std::string> listen(const std::string& address) override;
  Result<std::unique_ptr<Channel>> accept(int64_t timeout_ns) override;
  Result<std::unique_ptr<Channel>> connect(const std::string& address,
                                           const ChannelOptions& options,
                                           int64_t timeout_ns) override;
  [[nodiscard]] std::string backend_name() const override { return "tcp"; }

  // Peers dropped for an invalid hello (either direction), and the last such error.
  [[nodiscard]] uint64_t handshakes_rejected() const;
  [[nodiscard]] std::string last_handshake_error() const;

 private:
  EndpointOptions options_;
  std::optional<Error> security_error_;  // a mode that needs a key and has none (before keyring_)
  std::shared_ptr<TcpKeyring> keyring_;  // authenticated channels; nullptr with Security::none()
  std::shared_ptr<IoThread> io_;
  std::shared_ptr<Listener> listener_;  // accept loop, accepted queue, rejection counters
  std::string listen_address_;          // set by listen(); "" = not listening
};

}  // namespace detwan::transport::tcp
