// The tunnel key schedule: HKDF-SHA256 through OpenSSL's EVP_KDF (key_schedule.h).
#include "dataplane/aead/key_schedule.h"

#include <openssl/core_names.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <string>

#include "common/crypto.h"
#include "dataplane/wire/byte_order.h"

namespace detwan::dataplane::aead {

KeyScheduleInfo key_schedule_info(KeyPurpose purpose, uint32_t tunnel_id, uint64_t sender_epoch,
                                  uint64_t receiver_epoch) noexcept {
  KeyScheduleInfo info{};
  const char* label = purpose == KeyPurpose::kControl ? "ctl " : "data";
  for (int i = 0; i < 4; ++i) info[i] = static_cast<std::byte>(label[i]);
  wire::store_be32(info.data() + 4, tunnel_id);
  wire::store_be64(info.data() + 8, sender_epoch);
  wire::store_be64(info.data() + 16, purpose == KeyPurpose::kControl ? 0 : receiver_epoch);
  return info;
}

struct KeyDeriver::Context {
  EVP_KDF_CTX* kdf = nullptr;
  ~Context() { EVP_KDF_CTX_free(kdf); }
};

common::Result<KeyDeriver> KeyDeriver::create() {
  auto context = std::make_unique<Context>();
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf != nullptr) context->kdf = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);  // the context holds its own reference
  if (context->kdf == nullptr) {
    return common::make_error(common::ErrorCode::kConfig,
                              "cannot set up HKDF-SHA256: " + common::crypto::openssl_error());
  }
  return KeyDeriver(std::move(context));
}

KeyDeriver::KeyDeriver(std::unique_ptr<Context> context) noexcept
    : context_(std::move(context)) {}
KeyDeriver::KeyDeriver(KeyDeriver&&) noexcept = default;
KeyDeriver& KeyDeriver::operator=(KeyDeriver&&) noexcept = default;
KeyDeriver::~KeyDeriver() = default;

bool KeyDeriver::derive(const Key& secret, KeyPurpose purpose, uint32_t tunnel_id,
                        uint64_t sender_epoch, uint64_t receiver_epoch, Key* out) noexcept {
  KeyScheduleInfo info = key_schedule_info(purpose, tunnel_id, sender_epoch, receiver_epoch);
  char digest[] = "SHA256";
  // OpenSSL takes the inputs through non-const pointers; it only reads them.
  Key ikm = secret;
  char salt[sizeof kKeyScheduleSalt];
  std::copy(std::begin(kKeyScheduleSalt), std::end(kKeyScheduleSalt), salt);
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, ikm.data(), ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt, sizeof salt - 1),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  const bool ok = EVP_KDF_derive(context_->kdf, reinterpret_cast<unsigned char*>(out->data()),
                                 out->size(), params) == 1;
  ikm.fill(std::byte{0});
  if (!ok) out->fill(std::byte{0});
  return ok;
}

}  // namespace detwan::dataplane::aead
