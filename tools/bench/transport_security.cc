#include "tools/bench/transport_security.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <sys/stat.h>

#include "common/strings.h"
#include "transport/crypto/crypto.h"

namespace detwan::bench {

using common::ErrorCode;
using common::make_error;

namespace {
constexpr const char* kContext = "detwan-bench transport";
}  // namespace

common::Result<transport::SecurityKey> read_key_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("--key-file {}: {}", path, std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("--key-file {}: readable by group or others (mode {:04o}); a "
                                  "key file must be private: chmod 600 {}",
                                  path, st.st_mode & 07777, path));
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("--key-file {}: cannot read", path));
  }
  transport::SecurityKey key{};
  if (text.size() == key.size()) {
    std::memcpy(key.data(), text.data(), key.size());
    return key;
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0)
    text.pop_back();
  if (text.size() == 2 * key.size() &&
      common::decode_hex(text, reinterpret_cast<unsigned char*>(key.data()), key.size())) {
    return key;
  }
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("--key-file {}: {} bytes; a key is 32 raw bytes or 64 hex digits",
                                path, text.size()));
}

common::Result<transport::Security> security_from(const SecurityFlags& flags) {
  if (flags.insecure) {
    if (!flags.key_file.empty() || flags.encrypt) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--insecure asks for unauthenticated channels: it takes neither "
                        "--key-file nor --encrypt");
    }
    return transport::Security::none();
  }
  if (flags.key_file.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "no key: give the job's key with --key-file PATH (32 raw bytes or 64 hex "
                      "digits, mode 600), or run unauthenticated channels with --insecure");
  }
  auto key = read_key_file(flags.key_file);
  if (!key) return std::unexpected(key.error());
  return transport::Security::keyed(
      *key,
      flags.encrypt ? transport::SecurityMode::kEncrypt : transport::SecurityMode::kAuthenticate,
      kContext);
}

common::Result<transport::Security> in_process_security(const SecurityFlags& flags) {
  if (flags.insecure) return transport::Security::none();
  transport::SecurityKey key{};
  if (auto ok = transport::crypto::random_bytes(key); !ok) return std::unexpected(ok.error());
  return transport::Security::keyed(
      key,
      flags.encrypt ? transport::SecurityMode::kEncrypt : transport::SecurityMode::kAuthenticate,
      kContext);
}

}  // namespace detwan::bench
