#pragma once
// Several progress threads for one udp endpoint (backend_config "threads=N"): N lanes, each a
// complete datagram endpoint (transport/datagram/driver.h) with its own progress thread, its
// own io_uring and its own sockets. A channel lives on one lane for its whole life, so its
// connection state, its pacer and its sockets are touched by one thread only, exactly as with
// one thread; what spreads over cores is channels.
//  - connect(): the lanes take new channels in turn (round-robin).
//  - listen(): every lane binds the address in one SO_REUSEPORT group steered by connection id
//    (lane_steering.h), so every datagram of a connection, whichever client socket (path) it
//    came from, reaches the lane that owns it; accept() returns channels of all lanes from one
//    queue, in the order they were established.
// Rates stay exact in aggregate because nothing is shared: each channel paces its own paths at
// their own rates on its lane's thread; a reservation split over K channels (rate / K each, as
// the collectives split a job's reservation over its ranks) sums to the reservation whichever
// lanes they run on. One channel is still driven by one thread: a single channel faster than
// a core needs channels (or paths) of its own.
// Inline progress has one thread by definition: threads > 1 with inline_progress is refused.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/datagram/driver.h"
#include "transport/udp/link.h"

namespace detwan::transport::udp {

class LanedEndpoint final : public datagram::DatagramEndpointBase {
 public:
  using Lane = datagram::DatagramEndpoint<UdpLink>;
  using LinkFactory = std::function<Result<std::unique_ptr<UdpLink>>(const LinkOptions&)>;

  // `lanes` >= 2 progress threads; `make_link` builds each lane's link from `link_options`
  // (listen_lanes set here). Errors: kInvalidArgument for a lane count out of range, the
  // link's own error when a ring cannot be created.
  static Result<std::unique_ptr<LanedEndpoint>> create(uint32_t lanes, LinkOptions link_options,
                                                       const LinkFactory& make_link,
                                                       const EndpointOptions& options);
  ~LanedEndpoint() override;

  Result<std::string> listen(const std::string& address) override;
  Result<std::unique_ptr<Channel>> accept(int64_t timeout_ns) override;
  Result<std::unique_ptr<Channel>> connect(const std::string& address,
                                           const ChannelOptions& options,
                                           int64_t timeout_ns) override;
  [[nodiscard]] std::string backend_name() const override { return "udp"; }
  // The lanes' counters summed.
  [[nodiscard]] datagram::DriverCounters counters() const override;

  [[nodiscard]] size_t lane_count() const { return lanes_.size(); }
  [[nodiscard]] datagram::DriverCounters lane_counters(size_t lane) const {
    return lanes_[lane]->counters();
  }

 private:
  LanedEndpoint() = default;

  std::shared_ptr<datagram::AcceptQueue> accepted_ = std::make_shared<datagram::AcceptQueue>();
  std::shared_ptr<proto::MemoryBudget> budget_;  // EndpointOptions::max_reassembly_bytes, shared
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<uint64_t> next_lane_{0};
  std::atomic<bool> listening_{false};
};

}  // namespace detwan::transport::udp
