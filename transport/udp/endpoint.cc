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
#include "transport/udp/lane_steering.h"
#include "transport/udp/lanes.h"
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

// "busy_poll_us=auto": adaptive busy polling of at most this long per wait.
constexpr int64_t kAutoBusyPollNs = 50'000;

struct LinkSettings {
  int64_t busy_poll_ns = 0;
  bool adaptive_busy_poll = false;
  uint32_t threads = 1;  // progress threads (lanes.h)
  LinkOptions options;
};

// backend_config: "" or comma-separated settings: "busy_poll_us=N" (0 <= N <= 1 s, see
// UdpLink::set_busy_poll_ns) or "busy_poll_us=auto" (adaptive, at most 50 us per wait),
// "gso=0|1", "gro=0|1" (both on by default where the kernel has them; off is for comparisons),
// "threads=N" (1 <= N <= 64 progress threads, channels spread over them: lanes.h).
Result<LinkSettings> parse_backend_config(const std::string& config) {
  LinkSettings settings;
  auto invalid = [&](std::string_view item, std::string_view why) {
    return common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("udp backend_config '{}': '{}': {} (the udp backend takes busy_poll_us=N "
                    "with 0 <= N <= {} or busy_poll_us=auto, gso=0|1, gro=0|1 and threads=N "
                    "with 1 <= N <= {}, separated by commas)",
                    config, item, why, kMaxBusyPollUs, kMaxLanes));
  };
  std::string_view rest(config);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) return invalid(item, "not key=value");
    const std::string_view key = item.substr(0, equals);
    const std::string_view value = item.substr(equals + 1);
    if (key == "busy_poll_us" && value == "auto") {
      settings.adaptive_busy_poll = true;
      continue;
    }
    int64_t number = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (value.empty() || error != std::errc{} || end != value.data() + value.size()) {
      return invalid(item, "the value is not an integer");
    }
    if (key == "busy_poll_us") {
      if (number < 0 || number > kMaxBusyPollUs) return invalid(item, "busy_poll_us out of range");
      settings.busy_poll_ns = number * 1'000;
    } else if (key == "threads") {
      if (number < 1 || number > kMaxLanes) return invalid(item, "threads out of range");
      settings.threads = static_cast<uint32_t>(number);
    } else if (key == "gso" || key == "gro") {
      if (number != 0 && number != 1) return invalid(item, "must be 0 or 1");
      (key == "gso" ? settings.options.gso : settings.options.gro) = number == 1;
    } else {
      return invalid(item, "unknown setting");
    }
  }
  return settings;
}

}  // namespace

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options) {
  auto settings = parse_backend_config(options.backend_config);
  if (!settings) return std::unexpected(settings.error());
  auto checked = datagram::normalize_options(options.accept_options, "0.0.0.0:0");
  if (!checked) return std::unexpected(checked.error());
  if (static_cast<size_t>(checked->mtu_bytes) >
      UdpLink::kMaxDatagramBytes + datagram::kIpUdpHeaderBytes) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("accept_options.mtu_bytes: {} exceeds the udp limit {}",
                                          checked->mtu_bytes,
                                          UdpLink::kMaxDatagramBytes + datagram::kIpUdpHeaderBytes));
  }
  auto make_link = [&settings](const LinkOptions& link_options)
      -> Result<std::unique_ptr<UdpLink>> {
    auto link = UdpLink::create(link_options);
    if (!link) return std::unexpected(link.error());
    (*link)->set_busy_poll_ns(settings->busy_poll_ns);
    if (settings->adaptive_busy_poll) (*link)->set_adaptive_busy_poll(kAutoBusyPollNs);
    return link;
  };
  if (settings->threads > 1) {
    if (options.inline_progress) {
      return common::make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("udp backend_config '{}': threads={} with inline_progress: an inline "
                      "endpoint is driven by its one owning thread",
                      options.backend_config, settings->threads));
    }
    auto laned = LanedEndpoint::create(settings->threads, settings->options, make_link, options);
    if (!laned) return std::unexpected(laned.error());
    return std::unique_ptr<Endpoint>(std::move(*laned));
  }
  auto link = make_link(settings->options);
  if (!link) return std::unexpected(link.error());
  return std::make_unique<datagram::DatagramEndpoint<UdpLink>>(
      std::move(*link), "udp", options);
}

}  // namespace detwan::transport::udp
