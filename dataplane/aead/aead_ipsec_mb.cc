// AES-256-GCM of tunnel packets on intel-ipsec-mb's direct API (built when the library is
// present). Why: OpenSSL 3's EVP layer costs ~650 cycles per call on top of the cipher at small
// packets (docs/benchmarks/dataplane-security.md, "AEAD cost"); intel-ipsec-mb's single-call GCM
// functions take the
// key expanded once (gcm_key_data) and dispatch once, at manager set-up, to the best code for
// the CPU (AVX-512/VAES, AVX2, SSE). The functions keep no state in the manager, so threads
// share one. Datapath functions here: no allocation, no exceptions, no logging.
#include <new>

#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>

#include "common/ipsec_mb.h"
#include "dataplane/aead/aead_impl.h"

namespace detwan::dataplane::aead::ipsec_mb {
namespace {

IMB_MGR* manager() noexcept { return common::ipsec_mb_manager(); }

auto* u8(std::byte* p) noexcept { return reinterpret_cast<uint8_t*>(p); }
auto* u8(const std::byte* p) noexcept { return reinterpret_cast<const uint8_t*>(p); }

}  // namespace

struct ExpandedKey {
  gcm_key_data data{};
};

bool available() noexcept { return manager() != nullptr; }

ExpandedKey* create() noexcept {
  if (!available()) return nullptr;
  return new (std::nothrow) ExpandedKey();  // gcm_key_data is 16-aligned: aligned new
}

void destroy(ExpandedKey* key) noexcept {
  if (key == nullptr) return;
  OPENSSL_cleanse(&key->data, sizeof key->data);
  delete key;
}

void expand(ExpandedKey* key, const Key& raw) noexcept {
  IMB_AES256_GCM_PRE(manager(), u8(raw.data()), &key->data);
}

void seal(const ExpandedKey* key, const Nonce& nonce, const std::byte* aad, std::size_t aad_bytes,
          std::byte* text, std::size_t text_bytes, std::byte* tag) noexcept {
  gcm_context_data context;
  IMB_AES256_GCM_ENC(manager(), &key->data, &context, u8(text), u8(text), text_bytes,
                     u8(nonce.data()), u8(aad), aad_bytes, u8(tag), kTagBytes);
}

void open(const ExpandedKey* key, const Nonce& nonce, const std::byte* aad, std::size_t aad_bytes,
          std::byte* text, std::size_t text_bytes, std::byte* computed_tag) noexcept {
  gcm_context_data context;
  IMB_AES256_GCM_DEC(manager(), &key->data, &context, u8(text), u8(text), text_bytes,
                     u8(nonce.data()), u8(aad), aad_bytes, u8(computed_tag), kTagBytes);
}

}  // namespace detwan::dataplane::aead::ipsec_mb
