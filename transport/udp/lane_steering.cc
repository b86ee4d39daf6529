#include "transport/udp/lane_steering.h"

#include "common/reuseport_steering.h"
#include "transport/proto/wire.h"

namespace detwan::transport::udp {
namespace {

constexpr uint32_t kShortIdOffset = 1;  // DATA: connection id's low 32 bits
constexpr uint32_t kLongIdOffset = 10;  // common header: low half of the u64 id at 6
static_assert(kLongIdOffset + 4 <= proto::wire::kHeaderBytes);
static_assert(kShortIdOffset + 4 <= proto::wire::kShortHeaderBytes);
static_assert(kMaxLanes == common::kMaxSteeredSockets);

constexpr common::ReuseportKey kLaneKey{kLongIdOffset, proto::wire::kDataMarkerMask,
                                        proto::wire::kDataMarker, kShortIdOffset};

}  // namespace

uint32_t steered_lane(const uint8_t* datagram, uint32_t bytes, uint32_t lanes) {
  return common::steered_socket(kLaneKey, datagram, bytes, lanes);
}

common::Result<void> attach_lane_steering(int fd, uint32_t lanes) {
  return common::attach_reuseport_steering(fd, kLaneKey, lanes, "udp lanes");
}

}  // namespace detwan::transport::udp
