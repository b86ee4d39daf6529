// X25519 key pairs through OpenSSL's EVP_PKEY (x25519.h).
#include "common/x25519.h"

#include <memory>

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "common/crypto.h"

namespace detwan::common::crypto {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
};
template <typename T>
using PkeyOwned = std::unique_ptr<T, PkeyFree>;

std::unexpected<Error> x25519_failed(const char* what) {
  return make_error(ErrorCode::kInternal, std::string(what) + " failed: " + openssl_error());
}
std::unexpected<Error> x25519_invalid(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

const unsigned char* bytes(const X25519Key& key) {
  return reinterpret_cast<const unsigned char*>(key.data());
}
unsigned char* bytes(X25519Key& key) { return reinterpret_cast<unsigned char*>(key.data()); }

std::string_view trim_pem(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return text;
}

// Never ask a terminal for a passphrase: an encrypted PEM is refused.
int no_passphrase(char*, int, int, void*) { return 0; }

PkeyOwned<BIO> memory_bio(std::string_view text) {
  return PkeyOwned<BIO>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

Result<X25519KeyPair> pair_of(EVP_PKEY* pkey) {
  X25519KeyPair pair;
  size_t private_bytes = pair.private_key.size();
  size_t public_bytes = pair.public_key.size();
  if (EVP_PKEY_get_raw_private_key(pkey, bytes(pair.private_key), &private_bytes) != 1 ||
      EVP_PKEY_get_raw_public_key(pkey, bytes(pair.public_key), &public_bytes) != 1 ||
      private_bytes != kX25519KeyBytes || public_bytes != kX25519KeyBytes) {
    return x25519_failed("EVP_PKEY_get_raw_private_key (X25519)");
  }
  return pair;
}

}  // namespace

Result<X25519KeyPair> x25519_generate() {
  PkeyOwned<EVP_PKEY> pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519"));
  if (!pkey) return x25519_failed("EVP_PKEY_Q_keygen (X25519)");
  return pair_of(pkey.get());
}

Result<std::string> x25519_private_pem(const X25519Key& private_key) {
  PkeyOwned<EVP_PKEY> pkey(EVP_PKEY_new_raw_private_key_ex(nullptr, "X25519", nullptr,
                                                       bytes(private_key), private_key.size()));
  PkeyOwned<BIO> out(BIO_new(BIO_s_mem()));
  if (!pkey || !out ||
      PEM_write_bio_PrivateKey(out.get(), pkey.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return x25519_failed("PEM_write_bio_PrivateKey (X25519)");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(out.get(), &data);
  std::string pem(data, static_cast<size_t>(size));
  OPENSSL_cleanse(data, static_cast<size_t>(size));
  return pem;
}

Result<X25519KeyPair> x25519_from_private_pem(std::string_view pem) {
  PkeyOwned<BIO> in = memory_bio(pem);
  if (!in) return x25519_failed("BIO_new_mem_buf");
  PkeyOwned<EVP_PKEY> pkey(PEM_read_bio_PrivateKey(in.get(), nullptr, no_passphrase, nullptr));
  if (!pkey) {
    return x25519_invalid(
        "not an unencrypted PEM private key (expected '-----BEGIN PRIVATE KEY-----' as "
        "`openssl genpkey -algorithm X25519` writes): " +
        openssl_error());
  }
  if (!EVP_PKEY_is_a(pkey.get(), "X25519")) {
    const char* type = EVP_PKEY_get0_type_name(pkey.get());
    return x25519_invalid(fmt::format("a {} key, expected an X25519 key", type ? type : "unknown"));
  }
  return pair_of(pkey.get());
}

Result<X25519Key> x25519_parse_public(std::string_view text) {
  text = trim_pem(text);
  X25519Key key{};
  if (text.starts_with("-----BEGIN")) {
    PkeyOwned<BIO> in = memory_bio(text);
    PkeyOwned<EVP_PKEY> pkey(in ? PEM_read_bio_PUBKEY(in.get(), nullptr, no_passphrase, nullptr)
                            : nullptr);
    if (!pkey) return x25519_invalid("not a PEM public key: " + openssl_error());
    if (!EVP_PKEY_is_a(pkey.get(), "X25519")) {
      const char* type = EVP_PKEY_get0_type_name(pkey.get());
      return x25519_invalid(
          fmt::format("a {} public key, expected an X25519 key", type ? type : "unknown"));
    }
    size_t size = key.size();
    if (EVP_PKEY_get_raw_public_key(pkey.get(), bytes(key), &size) != 1 || size != key.size()) {
      return x25519_failed("EVP_PKEY_get_raw_public_key (X25519)");
    }
    return key;
  }
  const auto not_base64 = [&] {
    return x25519_invalid(fmt::format(
        "'{}' is not an X25519 public key: expected base64 of 32 bytes (44 characters ending "
        "in '=') or a PEM public key",
        text.size() > 60 ? std::string(text.substr(0, 60)) + "..." : std::string(text)));
  };
  if (text.size() != 44) return not_base64();
  unsigned char decoded[33];
  const std::string copy(text);
  if (EVP_DecodeBlock(decoded, reinterpret_cast<const unsigned char*>(copy.data()), 44) != 33) {
    return not_base64();
  }
  std::copy(decoded, decoded + 32, bytes(key));
  // One spelling per key: what x25519_public_base64 writes back (padding bits zero, one '=').
  if (x25519_public_base64(key) != text) return not_base64();
  return key;
}

std::string x25519_public_base64(const X25519Key& public_key) {
  unsigned char out[45];
  const int n = EVP_EncodeBlock(out, bytes(public_key), static_cast<int>(public_key.size()));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

Result<X25519Key> x25519_shared_secret(const X25519Key& private_key, const X25519Key& peer_public) {
  PkeyOwned<EVP_PKEY> own(EVP_PKEY_new_raw_private_key_ex(nullptr, "X25519", nullptr,
                                                      bytes(private_key), private_key.size()));
  PkeyOwned<EVP_PKEY> peer(EVP_PKEY_new_raw_public_key_ex(nullptr, "X25519", nullptr,
                                                      bytes(peer_public), peer_public.size()));
  if (!own || !peer) return x25519_failed("EVP_PKEY_new_raw_key (X25519)");
  PkeyOwned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, own.get(), nullptr));
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1) return x25519_failed("EVP_PKEY_derive_init (X25519)");
  X25519Key shared{};
  size_t size = shared.size();
  const bool derived = EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) == 1 &&
                       EVP_PKEY_derive(ctx.get(), bytes(shared), &size) == 1 &&
                       size == shared.size();
  static constexpr X25519Key kZero{};
  // OpenSSL itself fails the derivation on an all-zero result; check it here too.
  if (!derived || CRYPTO_memcmp(shared.data(), kZero.data(), shared.size()) == 0) {
    OPENSSL_cleanse(shared.data(), shared.size());
    return x25519_invalid(fmt::format(
        "peer public key {} is a small-order point: X25519 with it gives an all-zero shared "
        "secret ({})",
        x25519_public_base64(peer_public), derived ? "refused" : openssl_error()));
  }
  return shared;
}

}  // namespace detwan::common::crypto
