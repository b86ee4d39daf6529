#include "common/reuseport_steering.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <linux/filter.h>
#include <sys/socket.h>

namespace detwan::common {
namespace {

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

uint32_t steered_socket(const ReuseportKey& key, const uint8_t* datagram, uint32_t bytes,
                        uint32_t sockets) noexcept {
  if (sockets == 0) return 0;
  uint32_t offset = key.offset;
  if (key.marker_mask != 0) {
    if (bytes < 1) return 0;  // the first load fails
    if ((datagram[0] & key.marker_mask) == key.marker) offset = key.marker_offset;
  }
  if (uint64_t{bytes} < uint64_t{offset} + 4) return 0;  // a failed load returns 0
  return load_be32(datagram + offset) % sockets;
}

Result<void> attach_reuseport_steering(int fd, const ReuseportKey& key, uint32_t sockets,
                                       std::string_view what) {
  if (sockets == 0 || sockets > kMaxSteeredSockets) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}: {} sockets (1..{})", what, sockets, kMaxSteeredSockets));
  }
  std::vector<sock_filter> code;
  if (key.marker_mask != 0) {
    code.push_back(BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0));                  // A = first byte
    code.push_back(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, key.marker_mask));   // its marker bits
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, key.marker, 0, 2));  // marked?
    code.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, key.marker_offset));  // A = key (BE)
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0));
  }
  code.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, key.offset));  // A = key (big-endian load)
  code.push_back(BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, sockets));    // A = key mod sockets
  code.push_back(BPF_STMT(BPF_RET | BPF_A, 0));
  sock_fprog program{static_cast<unsigned short>(code.size()), code.data()};
  if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program, sizeof program) != 0) {
    return make_error(ErrorCode::kIo,
                      fmt::format("{}: SO_ATTACH_REUSEPORT_CBPF: {}", what, std::strerror(errno)));
  }
  return {};
}

}  // namespace detwan::common
