#include "transport/udp/endpoint.h"

#include <liburing.h>

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "transport/datagram/driver.h"
#include "transport/udp/link.h"

namespace detwan::transport::udp {

BackendInfo backend_info() {
  io_uring ring{};
  const int status = io_uring_queue_init(4, &ring, 0);
  if (status < 0) {
    return {"udp", true, false,
            fmt::format("io_uring_queue_init failed: {} (io_uring disabled or not permitted?)",
                        std::strerror(-status))};
  }
  io_uring_queue_exit(&ring);
  return {"udp", true, true, ""};
}

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options) {
  if (!options.backend_config.empty()) {
    return common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("udp backend_config: '{}': the udp backend takes no settings",
                    options.backend_config));
  }
  auto checked = datagram::normalize_options(options.accept_options, "0.0.0.0:0");
  if (!checked) return std::unexpected(checked.error());
  if (static_cast<size_t>(checked->mtu_bytes) >
      UdpLink::kMaxDatagramBytes + datagram::kIpUdpHeaderBytes) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("accept_options.mtu_bytes: {} exceeds the udp limit {}",
                                          checked->mtu_bytes,
                                          UdpLink::kMaxDatagramBytes + datagram::kIpUdpHeaderBytes));
  }
  auto link = UdpLink::create();
  if (!link) return std::unexpected(link.error());
  return std::make_unique<datagram::DatagramEndpoint<UdpLink>>(std::move(*link), "udp",
                                                               options.accept_options);
}

}  // namespace detwan::transport::udp
