#include "transport/udp/lane_steering.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <linux/filter.h>
#include <sys/socket.h>

#include "transport/proto/wire.h"

namespace detwan::transport::udp {
namespace {

constexpr uint32_t kShortIdOffset = 1;  // DATA: connection id's low 32 bits
constexpr uint32_t kLongIdOffset = 10;  // common header: low half of the u64 id at 6
static_assert(kLongIdOffset + 4 <= proto::wire::kHeaderBytes);
static_assert(kShortIdOffset + 4 <= proto::wire::kShortHeaderBytes);

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

uint32_t steered_lane(const uint8_t* datagram, uint32_t bytes, uint32_t lanes) {
  if (bytes < 1 || lanes == 0) return 0;
  const bool data = (datagram[0] & proto::wire::kDataMarkerMask) == proto::wire::kDataMarker;
  const uint32_t offset = data ? kShortIdOffset : kLongIdOffset;
  if (bytes < offset + 4) return 0;  // a failed load ends a classic BPF program with 0
  return load_be32(datagram + offset) % lanes;
}

common::Result<void> attach_lane_steering(int fd, uint32_t lanes) {
  if (lanes == 0 || lanes > kMaxLanes) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("udp lanes: {} lanes (1..{})", lanes, kMaxLanes));
  }
  // Offsets are from the UDP payload: the kernel runs a reuseport program past the UDP header.
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),                                // A = first byte
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, proto::wire::kDataMarkerMask),    // its type bits
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, proto::wire::kDataMarker, 0, 2),  // DATA?
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kShortIdOffset),  // A = id (big-endian load)
      BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kLongIdOffset),
      BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, lanes),  // A = id mod lanes
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program, sizeof program) != 0) {
    return common::make_error(
        common::ErrorCode::kIo,
        fmt::format("udp lanes: SO_ATTACH_REUSEPORT_CBPF: {}", std::strerror(errno)));
  }
  return {};
}

}  // namespace detwan::transport::udp
