// Setup of the gateway's host side: TUN device or DPDK local port, and the service sockets.
#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "dataplane/dpdk/gateway_impl.h"

namespace detwan::dataplane::dpdk {
namespace {

socklen_t to_sockaddr(const gw::Endpoint& endpoint, sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  if (endpoint.ipv6) {
    auto* address = reinterpret_cast<sockaddr_in6*>(out);
    address->sin6_family = AF_INET6;
    address->sin6_port = htons(endpoint.port);
    std::memcpy(&address->sin6_addr, endpoint.address, 16);
    return sizeof(sockaddr_in6);
  }
  auto* address = reinterpret_cast<sockaddr_in*>(out);
  address->sin_family = AF_INET;
  address->sin_port = htons(endpoint.port);
  std::memcpy(&address->sin_addr, endpoint.address, 4);
  return sizeof(sockaddr_in);
}

common::Result<common::UniqueFd> udp_socket(bool ipv6, const std::string& what) {
  common::UniqueFd fd(::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                               0));
  if (!fd.valid()) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("{}: socket: {}", what, std::strerror(errno)));
  }
  return fd;
}

common::Result<ServiceSocket> open_service_socket(const gw::Endpoint& listen,
                                                  const std::string& what) {
  auto fd = udp_socket(listen.ipv6, what);
  if (!fd) return std::unexpected(fd.error());
  sockaddr_storage address{};
  const socklen_t length = to_sockaddr(listen, &address);
  if (::bind(fd->get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("{}: bind {}: {}", what, gw::format_endpoint(listen),
                                          std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  if (::getsockname(fd->get(), reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("{}: getsockname: {}", what, std::strerror(errno)));
  }
  ServiceSocket service;
  service.port = ntohs(listen.ipv6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  service.fd = std::move(*fd);
  return service;
}

}  // namespace

common::Result<void> open_local_side(Gateway::Impl& impl, uint16_t queues) {
  LocalSide& local = impl.local;
  const gw::GatewayConfig& config = impl.config;
  if (impl.options.local_port) {
    const LocalPortOptions& options = *impl.options.local_port;
    if (!parse_mac(options.peer_mac, &local.peer_mac)) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("local port '{}': peer_mac '{}' is not a MAC address like "
                      "02:00:00:00:00:01",
                      options.device, options.peer_mac));
    }
    EthPortOptions port_options;
    port_options.label = fmt::format("local port '{}'", options.device);
    port_options.device = options.device;
    port_options.rx_queue_size = options.rx_queue_size;
    port_options.tx_queue_size = options.tx_queue_size;
    port_options.mtu_bytes = config.tun.mtu_bytes;
    port_options.want_checksum_offload = false;  // inner packets pass through untouched
    port_options.queues = queues;
    auto port = EthPort::open(port_options, impl.pool);
    if (!port) return std::unexpected(port.error());
    local.port = std::move(*port);
  } else if (config.tun.enabled) {
    auto tun = gw::TunDevice::open(config.tun);
    if (!tun) return std::unexpected(tun.error());
    local.tun.emplace(std::move(*tun));
  }

  local.service.resize(impl.engine.tunnel_count());
  bool need_sender[2] = {false, false};
  for (std::size_t i = 0; i < config.tunnels.size(); ++i) {
    const gw::TunnelConfig& tunnel = config.tunnels[i];
    const uint32_t index = impl.engine.tunnel_index(tunnel.id);
    if (index == gw::Engine::kNoTunnel || index >= local.service.size()) continue;
    if (tunnel.service_listen) {
      auto socket = open_service_socket(
          *tunnel.service_listen,
          fmt::format("tunnels[{}] (id {}): service_listen", i, tunnel.id));
      if (!socket) return std::unexpected(socket.error());
      socket->ipv6 = tunnel.service_listen->ipv6;
      local.service[index] = std::move(*socket);
    }
    // Released datagrams leave from the tunnel's own service socket when it has one of the
    // right family, else from an unbound sender socket.
    if (tunnel.service_deliver &&
        (!tunnel.service_listen || tunnel.service_listen->ipv6 != tunnel.service_deliver->ipv6)) {
      need_sender[tunnel.service_deliver->ipv6 ? 1 : 0] = true;
    }
  }
  for (int family = 0; family < 2; ++family) {
    if (!need_sender[family]) continue;
    auto fd = udp_socket(family == 1, "service sender");
    if (!fd) return std::unexpected(fd.error());
    (family == 1 ? local.sender_v6 : local.sender_v4) = std::move(*fd);
  }
  return {};
}

}  // namespace detwan::dataplane::dpdk
