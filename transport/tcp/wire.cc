#include "transport/tcp/wire.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/byte_order.h"

namespace detwan::transport::tcp {

void encode_hello(const Hello& hello, std::span<std::byte, kHelloBytes> out) {
  std::copy(kHelloMagic.begin(), kHelloMagic.end(), out.begin());
  common::store_be32(out.data() + 4, hello.version);
  common::store_be64(out.data() + 8, hello.max_message_bytes);
}

void encode_sealed_hello_prefix(uint64_t max_message_bytes, std::span<std::byte, kHelloBytes> out) {
  std::copy(kSealedHelloMagic.begin(), kSealedHelloMagic.end(), out.begin());
  common::store_be32(out.data() + 4, kSealedProtocolVersion);
  common::store_be64(out.data() + 8, max_message_bytes);
}

bool is_sealed_hello(std::span<const std::byte, kHelloBytes> in) {
  return std::equal(kSealedHelloMagic.begin(), kSealedHelloMagic.end(), in.begin());
}

common::Result<Hello> decode_hello(std::span<const std::byte, kHelloBytes> in,
                                   const std::string& peer) {
  if (is_sealed_hello(in)) {
    return common::make_error(
        common::ErrorCode::kInvalidArgument,
        fmt::format("tcp: security mode mismatch: {} runs authenticated channels ('DWT2') and "
                    "this endpoint Security::none(): give both ends the job's key "
                    "(EndpointOptions::security; tools: --key-file)",
                    peer));
  }
  if (!std::equal(kHelloMagic.begin(), kHelloMagic.end(), in.begin())) {
    // Printable rendering of what arrived, so "HTTP" or "SSH-" is recognisable in the error.
    std::string shown;
    for (size_t i = 0; i < kHelloMagic.size(); ++i) {
      const auto c = std::to_integer<unsigned char>(in[i]);
      shown += std::isprint(c) != 0 ? static_cast<char>(c) : '.';
    }
    return common::make_error(
        common::ErrorCode::kInvalidArgument,
        fmt::format("tcp: {} sent bad hello magic '{}' (0x{:08x}), expected 'DWT1'", peer, shown,
                    common::load_be32(in.data())));
  }
  Hello hello;
  hello.version = common::load_be32(in.data() + 4);
  hello.max_message_bytes = common::load_be64(in.data() + 8);
  if (hello.version != kProtocolVersion) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("tcp: {} speaks protocol version {}, expected {}", peer,
                                          hello.version, kProtocolVersion));
  }
  return hello;
}

}  // namespace detwan::transport::tcp
