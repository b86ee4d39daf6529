// PacingGroup::reserved: the same burst rule as a reserved path's own pacer
// (ConnectionImpl::reserved_pacer), without a send quantum: the group bounds what its channels
// send together, each channel's own pacer shapes its runs.
#include "transport/pacing_group.h"

#include <algorithm>

#include "transport/proto/connection_impl.h"

namespace detwan::transport {

std::shared_ptr<PacingGroup> PacingGroup::reserved(int64_t rate_bps, int32_t mtu_bytes,
                                                   int32_t frame_overhead_bytes,
                                                   int64_t max_burst_bytes) {
  const int32_t datagram_bytes = std::clamp(mtu_bytes, 256, 65535) - 28;
  const auto wire_bytes = static_cast<int64_t>(datagram_bytes + frame_overhead_bytes);
  const int64_t rate = std::max<int64_t>(rate_bps, 1);
  int32_t burst = proto::reserved_burst_datagrams(rate, wire_bytes);
  if (max_burst_bytes > 0) {
    burst = static_cast<int32_t>(std::clamp<int64_t>(max_burst_bytes / wire_bytes, 1, burst));
  }
  return std::make_shared<PacingGroup>(
      proto::Pacer(rate, frame_overhead_bytes, burst, datagram_bytes));
}

}  // namespace detwan::transport
