#pragma once
// A throwaway PKI for the TLS tests, made with the OpenSSL 3 C API (no shelling out): CAs and
// leaf certificates (P-256 keys, SHA-256, one day) with subjectAltNames, written as PEM files
// into a directory (keys mode 0600, as the agent's secret-file rules want). Test-only; aborts
// the test (gtest ADD_FAILURE) if OpenSSL refuses.
#include <cstdio>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

namespace detwan::control::testing {

struct PkiKeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct PkiCertDeleter {
  void operator()(X509* c) const { X509_free(c); }
};
using PkiKey = std::unique_ptr<EVP_PKEY, PkiKeyDeleter>;
using PkiCert = std::unique_ptr<X509, PkiCertDeleter>;

// A certificate and its key, in memory and as files.
struct Issued {
  PkiCert cert;
  PkiKey key;
  std::string cert_file;
  std::string key_file;
};

class TestPki {
 public:
  explicit TestPki(std::string dir) : dir_(std::move(dir)) {}

  // A self-signed CA named `name` (files NAME.crt / NAME.key).
  Issued ca(const std::string& name) { return issue(name, name, nullptr, true, ""); }

  // A leaf signed by `issuer`; `san` like "IP:127.0.0.1,URI:detwan://domain/w" ("" = none).
  Issued leaf(const std::string& name, const std::string& common_name, const Issued& issuer,
              const std::string& san) {
    return issue(name, common_name, &issuer, false, san);
  }

 private:
  static void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    ASSERT_NE(ext, nullptr) << value;
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }

  Issued issue(const std::string& name, const std::string& common_name, const Issued* issuer,
               bool is_ca, const std::string& san) {
    Issued out;
    out.key.reset(EVP_EC_gen("P-256"));
    EXPECT_NE(out.key, nullptr);
    out.cert.reset(X509_new());
    X509* cert = out.cert.get();
    X509_set_version(cert, 2);
    unsigned char serial[8];
    RAND_bytes(serial, sizeof serial);
    serial[0] &= 0x7f;
    BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert));
    BN_free(bn);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
    X509_set_pubkey(cert, out.key.get());
    X509_NAME* subject = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("detwan test"), -1, -1, 0);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                               0);
    X509* signer = issuer != nullptr ? issuer->cert.get() : cert;
    X509_set_issuer_name(cert, X509_get_subject_name(signer));
    if (is_ca) {
      add_extension(cert, signer, NID_basic_constraints, "critical,CA:TRUE");
      add_extension(cert, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
      add_extension(cert, signer, NID_basic_constraints, "CA:FALSE");
      add_extension(cert, signer, NID_ext_key_usage, "serverAuth,clientAuth");
    }
    if (!san.empty()) add_extension(cert, signer, NID_subject_alt_name, san);
    EVP_PKEY* signing_key = issuer != nullptr ? issuer->key.get() : out.key.get();
    EXPECT_GT(X509_sign(cert, signing_key, EVP_sha256()), 0);
    out.cert_file = dir_ + "/" + name + ".crt";
    out.key_file = dir_ + "/" + name + ".key";
    FILE* f = std::fopen(out.cert_file.c_str(), "w");
    PEM_write_X509(f, cert);
    std::fclose(f);
    f = std::fopen(out.key_file.c_str(), "w");
    ::fchmod(fileno(f), 0600);
    PEM_write_PrivateKey(f, out.key.get(), nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(f);
    return out;
  }

  std::string dir_;
};

}  // namespace detwan::control::testing
