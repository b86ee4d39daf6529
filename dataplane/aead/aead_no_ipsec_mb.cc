// Built instead of aead_ipsec_mb.cc where intel-ipsec-mb is absent: the backend is unavailable
// (AeadKey::create with Backend::kIpsecMb is then a kConfig error; kAuto uses OpenSSL).
#include "dataplane/aead/aead_impl.h"

namespace detwan::dataplane::aead::ipsec_mb {

struct ExpandedKey {};

bool available() noexcept { return false; }
ExpandedKey* create() noexcept { return nullptr; }
void destroy(ExpandedKey* /*key*/) noexcept {}
void expand(ExpandedKey* /*key*/, const Key& /*raw*/) noexcept {}
void seal(const ExpandedKey* /*key*/, const Nonce& /*nonce*/, const std::byte* /*aad*/,
          std::size_t /*aad_bytes*/, std::byte* /*text*/, std::size_t /*text_bytes*/,
          std::byte* /*tag*/) noexcept {}
void open(const ExpandedKey* /*key*/, const Nonce& /*nonce*/, const std::byte* /*aad*/,
          std::size_t /*aad_bytes*/, std::byte* /*text*/, std::size_t /*text_bytes*/,
          std::byte* /*computed_tag*/) noexcept {}

}  // namespace detwan::dataplane::aead::ipsec_mb
