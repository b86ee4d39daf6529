// The shared-directory rendezvous: one authenticated record per rank, published atomically.
//
// DIR/<prefix>.<rank> holds the rank's join payload followed by HMAC(file key, name | payload)
// (bootstrap_keys.h); <prefix> derives from the secret without revealing it. Files are created
// 0600 with O_EXCL | O_NOFOLLOW under a random temporary name, then link()ed to their name, so a
// reader never sees a partial record and nothing another user planted is ever overwritten or
// followed. A reader refuses a record that is not a regular file of this user, is larger than a
// record can be, or does not verify.
#include "collectives/comm/bootstrap_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "collectives/comm/bootstrap_keys.h"

namespace detwan::collectives::bootstrap {
namespace {

constexpr size_t kMaxRecordBytes = kMaxJoinPayloadBytes + crypto::kMacBytes;

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

Result<void> write_new_file(const std::string& path, std::string_view bytes) {
  common::UniqueFd fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return make_error(ErrorCode::kIo,
                      fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd.get(), bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return make_error(ErrorCode::kIo,
                        fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

class FileBootstrap final : public Bootstrap {
 public:
  FileBootstrap(Spec spec, int rank, int nranks, std::string local_host, RendezvousKeys keys,
                std::string prefix, CommKey communicator_key)
      : spec_(std::move(spec)),
        rank_(rank),
        nranks_(nranks),
        local_host_(std::move(local_host)),
        keys_(std::move(keys)),
        prefix_(std::move(prefix)),
        communicator_key_(communicator_key),
        where_(fmt::format("bootstrap {} (rank {})", spec_.name(), rank_)) {}

  [[nodiscard]] std::string local_host() const override { return local_host_; }
  [[nodiscard]] CommKey communicator_key() const override { return communicator_key_; }

  Result<std::vector<std::string>> exchange(const std::string& mine,
                                            int64_t timeout_ns) override {
    if (used_) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: exchange() may be called only once", where_));
    }
    used_ = true;
    if (mine.size() > kMaxBlobBytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: blob of {} bytes exceeds the limit of {}", where_,
                                    mine.size(), kMaxBlobBytes));
    }
    const int64_t deadline_ns = now_ns() + timeout_ns;
    if (auto published = publish(mine); !published) return std::unexpected(published.error());
    std::vector<std::string> blobs(static_cast<size_t>(nranks_));
    std::vector<bool> have(static_cast<size_t>(nranks_), false);
    int missing = nranks_;
    int64_t pause_ns = 1'000'000;
    while (true) {
      for (int rank = 0; rank < nranks_; ++rank) {
        if (have[rank]) continue;
        auto blob = try_read(rank);
        if (!blob) return std::unexpected(blob.error());
        if (!blob->has_value()) continue;
        blobs[rank] = std::move(**blob);
        have[rank] = true;
        --missing;
      }
      if (missing == 0) break;
      const int64_t now = now_ns();
      if (now >= deadline_ns) {
        std::vector<int> absent;
        for (int rank = 0; rank < nranks_; ++rank) {
          if (!have[rank]) absent.push_back(rank);
        }
        return make_error(ErrorCode::kTimeout,
                          fmt::format("{}: rank{} {} never joined within {}", where_,
                                      absent.size() == 1 ? "" : "s", join_ranks(absent),
                                      format_seconds(timeout_ns)));
      }
      // Setup code polling a directory: short pauses, growing to 50 ms.
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(pause_ns, deadline_ns - now)));
      pause_ns = std::min<int64_t>(pause_ns * 2, 50'000'000);
    }
    clean_up();
    return blobs;
  }

 private:
  [[nodiscard]] std::string path_of(int rank) const {
    return fmt::format("{}/{}.{}", spec_.dir, prefix_, rank);
  }

  // Writes a new temporary file (random name, 0600, never an existing one), then link()s it to
  // its final name: readers never see a partial record, and an existing file (a duplicate
  // rank, a stale run, or another user's) is an error, not overwritten.
  Result<void> publish(const std::string& blob) {
    const std::string path = path_of(rank_);
    const std::string record = encode_join({rank_, nranks_, blob});
    auto mac = keys_.file_mac(base_name(path), record);
    if (!mac) return std::unexpected(mac.error());
    auto suffix = crypto::random_hex(8);
    if (!suffix) return std::unexpected(suffix.error());
    const std::string tmp = fmt::format("{}.tmp.{}", path, *suffix);
    if (auto written = write_new_file(tmp, record + std::string(crypto::view(*mac))); !written) {
      ::unlink(tmp.c_str());
      return make_error(ErrorCode::kIo, fmt::format("{}: {}", where_, written.error().message));
    }
    int rc = ::link(tmp.c_str(), path.c_str());
    const int err = errno;
    if (rc != 0 && err != EEXIST) {
      // Some filesystems cannot hard-link: fall back to rename (atomic, but clobbers).
      rc = exists(path) ? -1 : ::rename(tmp.c_str(), path.c_str());
    }
    ::unlink(tmp.c_str());
    if (rc != 0) {
      if (exists(path)) {
        return make_error(ErrorCode::kAlreadyExists,
                          fmt::format("{}: {} already exists (rank {} joined twice, a stale file "
                                      "from an earlier run with this secret, or a file someone "
                                      "else planted: use a fresh secret or directory)",
                                      where_, path, rank_));
      }
      return make_error(ErrorCode::kIo, fmt::format("{}: cannot publish {}: {}", where_, path,
                                                    std::strerror(err)));
    }
    return {};
  }

  // nullopt while the rank's file does not exist yet.
  Result<std::optional<std::string>> try_read(int rank) const {
    const std::string path = path_of(rank);
    const auto bad = [&](const std::string& why) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: {}: {}", where_, path, why));
    };
    common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT) return std::optional<std::string>{};
      return bad(fmt::format("cannot open: {} (a symbolic link or another user's file?)",
                             std::strerror(errno)));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return bad("not a regular file");
    if (st.st_uid != ::geteuid()) {
      return bad(fmt::format("owned by uid {}, not this job's uid {}: planted by another user",
                             st.st_uid, ::geteuid()));
    }
    if (static_cast<uint64_t>(st.st_size) > kMaxRecordBytes) {
      return bad(
          fmt::format("{} bytes, more than a record can be ({})", st.st_size, kMaxRecordBytes));
    }
    std::string bytes(static_cast<size_t>(st.st_size), '\0');
    size_t have = 0;
    while (have < bytes.size()) {
      const ssize_t n = ::read(fd.get(), bytes.data() + have, bytes.size() - have);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return bad("cannot read it whole");
      have += static_cast<size_t>(n);
    }
    if (bytes.size() < crypto::kMacBytes) return bad("too short to be a record");
    const std::string_view record =
        std::string_view(bytes).substr(0, bytes.size() - crypto::kMacBytes);
    auto mac = keys_.file_mac(base_name(path), record);
    if (!mac) return std::unexpected(mac.error());
    if (!crypto::equal(crypto::view(*mac), std::string_view(bytes).substr(record.size()))) {
      return bad(
          "not written with the job's secret (altered, planted by another process, or "
          "left by a run with another secret): refused");
    }
    auto join = decode_join(record);
    if (!join) return bad(join.error().message);
    if (join->rank != rank) return bad(fmt::format("holds rank {}", join->rank));
    if (join->nranks != nranks_) {
      return bad(fmt::format("rank {} joined with nranks {}, expected {}", rank, join->nranks,
                             nranks_));
    }
    return std::optional<std::string>(std::move(join->blob));
  }

  // Each rank marks that it has read everything; whoever then sees every mark removes the
  // files, so the directory is left empty without any rank waiting for another.
  void clean_up() const {
    const std::string done = path_of(rank_) + ".done";
    (void)write_new_file(done, "");
    for (int rank = 0; rank < nranks_; ++rank) {
      if (!exists(path_of(rank) + ".done")) return;
    }
    for (int rank = 0; rank < nranks_; ++rank) {
      ::unlink(path_of(rank).c_str());
      ::unlink((path_of(rank) + ".done").c_str());
    }
  }

  Spec spec_;
  int rank_;
  int nranks_;
  std::string local_host_;
  RendezvousKeys keys_;
  std::string prefix_;
  CommKey communicator_key_;
  std::string where_;
  bool used_ = false;
};

// The directory: every user who can write it can delete or pre-create the files (and so stall
// the rendezvous) but never forge one (the records are authenticated). Refused: what is not a
// directory, and a directory every user may write without the sticky bit (anyone could also
// remove or rename this job's files).
Result<void> check_directory(const Spec& spec) {
  struct stat st {};
  if (::stat(spec.dir.c_str(), &st) != 0) {
    return make_error(ErrorCode::kNotFound,
                      fmt::format("bootstrap {}: directory {} does not exist", spec.name(),
                                  spec.dir));
  }
  if (!S_ISDIR(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap {}: {} is not a directory", spec.name(), spec.dir));
  }
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap {}: directory {} is writable by every user without "
                                  "the sticky bit, so anyone could remove or replace the job's "
                                  "files; use a directory only the job's users can write "
                                  "(mkdir -m 0700, or 0770 for a group) or a sticky one (1777)",
                                  spec.name(), spec.dir));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Bootstrap>> join_file(const Spec& spec, int rank, int nranks) {
  std::string secret;
  if (spec.secret) {
    secret = *spec.secret;
  } else {
    auto from_env = environment_secret(spec);  // no secret at all: refused, naming both ways
    if (!from_env) return std::unexpected(from_env.error());
    secret = *from_env;
  }
  if (auto ok = check_directory(spec); !ok) return std::unexpected(ok.error());
  // Bound to "file", not to the path: ranks may mount the shared directory at different paths.
  auto keys = RendezvousKeys::make(secret, "file");
  if (!keys) return std::unexpected(keys.error());
  auto prefix = keys->file_prefix();
  if (!prefix) return std::unexpected(prefix.error());
  auto comm_key = keys->communicator_key("");
  if (!comm_key) return std::unexpected(comm_key.error());
  const char* env_host = std::getenv("DETWAN_LISTEN_HOST");
  std::string host = env_host != nullptr && *env_host != '\0' ? env_host : "127.0.0.1";
  return std::make_unique<FileBootstrap>(spec, rank, nranks, std::move(host), std::move(*keys),
                                         std::move(*prefix), *comm_key);
}

}  // namespace detwan::collectives::bootstrap
