#include "common/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "common/unique_fd.h"

namespace detwan::common {

Result<std::string> read_secret_file(const std::string& path, std::string_view what,
                                     size_t max_bytes) {
  // O_NONBLOCK: a FIFO put in the key's place must not hang the start-up (it is refused below).
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return make_error(ErrorCode::kIo,
                      fmt::format("{} '{}': fstat: {}", what, path, std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("{} '{}' is not a regular file", what, path));
  }
  const uid_t own = ::geteuid();
  if ((info.st_uid != 0 && info.st_uid != own) || (info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return make_error(
        ErrorCode::kConfig,
        fmt::format("{} '{}' (owner uid {}, mode {:04o}): a secret must belong to root or to uid "
                    "{} (this process) and be readable by its owner only (chmod 600)",
                    what, path, info.st_uid, info.st_mode & 07777, own));
  }
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("{} '{}' is not a {}: {} bytes, at most {}", what, path, what,
                                  info.st_size, max_bytes));
  }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return make_error(ErrorCode::kIo,
                        fmt::format("{} '{}': read: {}", what, path, std::strerror(errno)));
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
    if (text.size() > max_bytes) {
      return make_error(ErrorCode::kConfig, fmt::format("{} '{}' is not a {}: more than {} bytes",
                                                        what, path, what, max_bytes));
    }
  }
  return text;
}

}  // namespace detwan::common
