// PacketCipher on intel-ipsec-mb's direct AES-256-GCM API (built when the library is present).
// Why not OpenSSL here: per 1,472-byte datagram on this project's machines (VAES + AVX-512),
// tag-only GCM costs ~75 ns with intel-ipsec-mb against ~365 ns through OpenSSL 3's EVP layer,
// and encrypting ~160 ns against ~630 ns (docs/benchmarks/transport.md, "Authenticated transport
// channels"). The key is expanded once (create / rekey); per packet only the nonce. One
// process-wide manager dispatches to the best implementation for the CPU; the single-call GCM
// functions keep no state in it, so threads share it.
#include <utility>

#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>

#include "common/ipsec_mb.h"
#include "transport/crypto/crypto.h"
#include "transport/crypto/crypto_impl.h"

namespace detwan::transport::crypto {
namespace {

IMB_MGR* manager() noexcept { return common::ipsec_mb_manager(); }

auto* u8(std::byte* p) noexcept { return reinterpret_cast<uint8_t*>(p); }
auto* u8(const std::byte* p) noexcept { return reinterpret_cast<const uint8_t*>(p); }

}  // namespace

struct PacketCipher::Contexts {
  gcm_key_data key{};
};

PacketCipher::PacketCipher(std::unique_ptr<Contexts> contexts) noexcept
    : contexts_(std::move(contexts)) {}
PacketCipher::PacketCipher(PacketCipher&&) noexcept = default;
PacketCipher& PacketCipher::operator=(PacketCipher&&) noexcept = default;
PacketCipher::~PacketCipher() {
  if (contexts_) OPENSSL_cleanse(&contexts_->key, sizeof contexts_->key);
}

const char* PacketCipher::implementation() noexcept { return "intel-ipsec-mb"; }

common::Result<PacketCipher> PacketCipher::create() {
  if (manager() == nullptr) {
    return common::make_error(common::ErrorCode::kConfig,
                              "cannot set up aes-256-gcm: intel-ipsec-mb's alloc_mb_mgr failed");
  }
  return PacketCipher(std::make_unique<Contexts>());
}

common::Result<PacketCipher> PacketCipher::create(const Key& key) {
  auto cipher = create();
  if (!cipher) return cipher;
  (void)cipher->rekey(key);
  return cipher;
}

bool PacketCipher::rekey(const Key& key) noexcept {
  IMB_AES256_GCM_PRE(manager(), u8(key.data()), &contexts_->key);
  keyed_ = true;
  return true;
}

bool PacketCipher::seal(uint64_t packet_number, std::span<const std::byte> aad,
                        std::span<std::byte> text, std::span<std::byte, kTagBytes> tag) noexcept {
  if (!keyed_) return false;
  const auto nonce = gcm_nonce(packet_number);
  gcm_context_data context;
  IMB_AES256_GCM_ENC(manager(), &contexts_->key, &context, u8(text.data()), u8(text.data()),
                     text.size(), nonce.data(), u8(aad.data()), aad.size(), u8(tag.data()),
                     kTagBytes);
  return true;
}

bool PacketCipher::open(uint64_t packet_number, std::span<const std::byte> aad,
                        std::span<const std::byte> text, std::span<std::byte> plain,
                        std::span<const std::byte, kTagBytes> tag) noexcept {
  if (!keyed_ || plain.size() != text.size()) return false;
  const auto nonce = gcm_nonce(packet_number);
  gcm_context_data context;
  Tag computed{};
  IMB_AES256_GCM_DEC(manager(), &contexts_->key, &context, u8(plain.data()), u8(text.data()),
                     text.size(), nonce.data(), u8(aad.data()), aad.size(), u8(computed.data()),
                     kTagBytes);
  return CRYPTO_memcmp(computed.data(), tag.data(), kTagBytes) == 0;
}

}  // namespace detwan::transport::crypto
