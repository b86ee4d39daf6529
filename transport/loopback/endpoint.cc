#include "transport/loopback/endpoint.h"

#include <memory>

#include "transport/datagram/driver.h"
#include "transport/loopback/fabric.h"
#include "transport/loopback/faults.h"
#include "transport/loopback/link.h"

namespace detwan::transport::loopback {

BackendInfo backend_info() { return {"loopback", true, true, ""}; }

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options) {
  auto faults = parse_faults(options.backend_config);
  if (!faults) return std::unexpected(faults.error());
  auto options_check = datagram::normalize_options(options.accept_options, "accept");
  if (!options_check) return std::unexpected(options_check.error());
  return std::make_unique<datagram::DatagramEndpoint<LoopbackLink>>(
      std::make_unique<LoopbackLink>(*faults), "loopback", options);
}

Result<void> partition(const std::string& address, bool partitioned) {
  return Fabric::instance().set_partitioned(address, partitioned);
}

}  // namespace detwan::transport::loopback
