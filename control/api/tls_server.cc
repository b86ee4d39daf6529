// The agent's TLS: its server context, and the domain a peer certificate names (http_server.h,
// docs/trust.md "Certificates").
#include <fmt/format.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/secret_file.h"
#include "control/api/http_internal.h"

namespace detwan::control::api {
namespace asio = boost::asio;

std::string certificate_sha256(const void* x509) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (X509_digest(static_cast<const X509*>(x509), EVP_sha256(), digest, &length) != 1) return "";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::string certificate_domain(const void* x509) {
  const X509* cert = static_cast<const X509*>(x509);
  if (cert == nullptr) return "";
  std::string domain;
  constexpr std::string_view kPrefix = "detwan://domain/";
  if (auto* names = static_cast<GENERAL_NAMES*>(
          X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names) && domain.empty(); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
      if (name->type != GEN_URI) continue;
      const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
      const std::string_view text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                                  static_cast<size_t>(ASN1_STRING_length(uri)));
      if (text.substr(0, kPrefix.size()) == kPrefix) domain = text.substr(kPrefix.size());
    }
    GENERAL_NAMES_free(names);
  }
  if (domain.empty()) {
    const X509_NAME* subject = X509_get_subject_name(cert);
    const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (index >= 0) {
      unsigned char* utf8 = nullptr;
      const int length =
          ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index)));
      if (length > 0) domain.assign(reinterpret_cast<char*>(utf8), static_cast<size_t>(length));
      OPENSSL_free(utf8);
    }
  }
  // A domain is a name (it reaches logs and routes): anything else names no domain.
  return detail::valid_label(domain, false) ? domain : "";
}

// The server's TLS context: TLS 1.2+ (1.3 preferred), our chain and key (a secret file), and
// the CAs whose client certificates we accept. Errors name the file and OpenSSL's reason.
common::Result<std::unique_ptr<asio::ssl::context>> detail::make_server_context(
    const TlsServerOptions& tls) {
  auto fail = [](const std::string& what) {
    return common::make_error(common::ErrorCode::kConfig, what);
  };
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  boost::system::error_code ec;
  ctx->use_certificate_chain_file(tls.cert_file, ec);
  if (ec) return fail(fmt::format("TLS certificate {}: {}", tls.cert_file, ec.message()));
  if (tls.key_file.empty()) return fail("TLS: a certificate needs its key file (tls.key)");
  auto key = common::read_secret_file(tls.key_file, "TLS key file", size_t{1} << 16);
  if (!key) return std::unexpected(key.error());
  ctx->use_private_key(asio::buffer(*key), asio::ssl::context::pem, ec);
  OPENSSL_cleanse(key->data(), key->size());
  if (ec) return fail(fmt::format("TLS key {}: {}", tls.key_file, ec.message()));
  if (SSL_CTX_check_private_key(native) != 1) {
    return fail(
        fmt::format("TLS key {} does not match the certificate {}", tls.key_file, tls.cert_file));
  }
  if (!tls.client_ca_file.empty()) {
    ctx->load_verify_file(tls.client_ca_file, ec);
    if (ec) return fail(fmt::format("TLS client CA {}: {}", tls.client_ca_file, ec.message()));
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(native, names);
    }
    ctx->set_verify_mode(asio::ssl::verify_peer |
                         (tls.require_client_cert ? asio::ssl::verify_fail_if_no_peer_cert : 0));
  } else if (tls.require_client_cert) {
    return fail("TLS: require_client_cert needs client_ca (the CAs whose clients are accepted)");
  }
  return ctx;
}

common::Result<void> check_tls_options(const TlsServerOptions& tls) {
  if (tls.cert_file.empty()) return {};
  auto ctx = detail::make_server_context(tls);
  if (!ctx) return std::unexpected(ctx.error());
  return {};
}

}  // namespace detwan::control::api
