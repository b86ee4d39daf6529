#include "transport/udp/endpoint.h"

#include <liburing.h>

#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
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

namespace {

constexpr int64_t kMaxBusyPollUs = 1'000'000;

// backend_config: "" or "busy_poll_us=N" (0 <= N <= 1 s): see UdpLink::set_busy_poll_ns.
Result<int64_t> parse_busy_poll_ns(const std::string& config) {
  if (config.empty()) return int64_t{0};
  auto invalid = [&](std::string_view why) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("udp backend_config: '{}': {} (the udp backend takes "
                                          "only busy_poll_us=N, 0 <= N <= {})",
                                          config, why, kMaxBusyPollUs));
  };
  constexpr std::string_view kKey = "busy_poll_us=";
  if (!config.starts_with(kKey)) return invalid("unknown setting");
  const std::string_view value = std::string_view(config).substr(kKey.size());
  int64_t us = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), us);
  if (value.empty() || error != std::errc{} || end != value.data() + value.size()) {
    return invalid("busy_poll_us is not an integer");
  }
  if (us < 0 || us > kMaxBusyPollUs) return invalid("busy_poll_us out of range");
  return us * 1'000;
}

}  // namespace

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options) {
  auto busy_poll_ns = parse_busy_poll_ns(options.backend_config);
  if (!busy_poll_ns) return std::unexpected(busy_poll_ns.error());
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
  (*link)->set_busy_poll_ns(*busy_poll_ns);
  return std::make_unique<datagram::DatagramEndpoint<UdpLink>>(std::move(*link), "udp",
                                                               options.accept_options);
}

}  // namespace detwan::transport::udp
