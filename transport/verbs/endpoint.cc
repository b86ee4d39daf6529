// The verbs backend: endpoint setup (bootstrap listen/accept/connect) and registry entry.
#include "transport/verbs/endpoint.h"

#include <fmt/format.h>

#include "transport/verbs/bootstrap.h"
#include "transport/verbs/channel.h"
#include "transport/verbs/resources.h"

namespace detwan::transport::verbs {
namespace {

using common::ErrorCode;

// Listens and connects over TCP ("host:port") for the QP info exchange; every channel gets its
// own QP, CQ, buffer pools and progress thread on the shared device/PD.
class VerbsEndpoint final : public Endpoint {
 public:
  VerbsEndpoint(std::shared_ptr<Device> device, EndpointOptions options)
      : device_(std::move(device)), options_(std::move(options)) {}

  Result<std::string> listen(const std::string& address) override {
    if (listener_.valid()) {
      return common::make_error(ErrorCode::kAlreadyExists,
                                fmt::format("verbs: listen('{}'): already listening on {}",
                                            address, bound_));
    }
    auto fd = listen_tcp(address, bound_);
    if (!fd) return std::unexpected(fd.error());
    listener_ = std::move(*fd);
    return bound_;
  }

  Result<std::unique_ptr<Channel>> accept(int64_t timeout_ns) override {
    if (!listener_.valid()) {
      return common::make_error(ErrorCode::kInvalidArgument, "verbs: accept() before listen()");
    }
    auto fd = accept_tcp(listener_.get(), timeout_ns);
    if (!fd) return std::unexpected(fd.error());
    return make_channel(device_, std::move(*fd), options_.accept_options, timeout_ns);
  }

  Result<std::unique_ptr<Channel>> connect(const std::string& address,
                                           const ChannelOptions& options,
                                           int64_t timeout_ns) override {
    auto fd = connect_tcp(address, timeout_ns);
    if (!fd) return std::unexpected(fd.error());
    return make_channel(device_, std::move(*fd), options, timeout_ns);
  }

  [[nodiscard]] std::string backend_name() const override { return "verbs"; }

 private:
  std::shared_ptr<Device> device_;
  EndpointOptions options_;
  common::UniqueFd listener_;
  std::string bound_;
};

}  // namespace

BackendInfo backend_info() {
  // NULL (e.g. ENOSYS: no RDMA support in the kernel) also means no device was found.
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list != nullptr) ibv_free_device_list(list);
  if (list == nullptr || count == 0) {
    return {"verbs", true, false, "no RDMA device (ibv_get_device_list found 0 devices)"};
  }
  return {"verbs", true, true, ""};
}

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options) {
  if (!options.backend_config.empty()) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("verbs: backend_config '{}': the verbs backend has no "
                                          "settings",
                                          options.backend_config));
  }
  auto device = open_first_device();
  if (!device) return std::unexpected(device.error());
  return std::make_unique<VerbsEndpoint>(std::move(*device), options);
}

}  // namespace detwan::transport::verbs
