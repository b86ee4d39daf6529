// The shared-directory rendezvous: DIR/<nonce>.<rank> files, published atomically.
#include "collectives/comm/bootstrap_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace detwan::collectives::bootstrap {
namespace {

// Without a nonce the files are named "bootstrap.<rank>".
std::string file_prefix(const Spec& spec) { return spec.nonce.value_or("bootstrap"); }

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

class FileBootstrap final : public Bootstrap {
 public:
  FileBootstrap(Spec spec, int rank, int nranks, std::string local_host)
      : spec_(std::move(spec)),
        rank_(rank),
        nranks_(nranks),
        local_host_(std::move(local_host)),
        where_(fmt::format("bootstrap {} (rank {})", spec_.name(), rank_)) {}

  [[nodiscard]] std::string local_host() const override { return local_host_; }

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
    if (auto published = publish(encode_join({spec_.nonce.value_or(""), rank_, nranks_, mine}));
        !published) {
      return std::unexpected(published.error());
    }
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
    return fmt::format("{}/{}.{}", spec_.dir, file_prefix(spec_), rank);
  }

  // Writes a temporary file, then link()s it to its final name: readers never see a partial
  // file, and an existing file (a duplicate rank, or a stale run) is an error, not overwritten.
  Result<void> publish(const std::string& payload) {
    const std::string path = path_of(rank_);
    // pid + thread: ranks run as threads of one process in tests.
    const std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, ::getpid(),
                                        std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
      out.close();
      if (!out) {
        ::unlink(tmp.c_str());
        return make_error(ErrorCode::kIo, fmt::format("{}: cannot write {}: {}", where_, tmp,
                                                      std::strerror(errno)));
      }
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
                          fmt::format("{}: {} already exists (rank {} joined twice, or a stale "
                                      "file from an earlier run: use a fresh nonce or directory)",
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
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return std::optional<std::string>{};
    std::string payload(static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0)), '\0');
    in.seekg(0);
    in.read(payload.data(), static_cast<std::streamsize>(payload.size()));
    if (!in) {
      return make_error(ErrorCode::kIo, fmt::format("{}: cannot read {}", where_, path));
    }
    auto join = decode_join(payload);
    const auto bad = [&](const std::string& why) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: {}: {}", where_, path, why));
    };
    if (!join) return bad(join.error().message);
    if (join->nonce != spec_.nonce.value_or("")) return bad("wrong nonce");
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
    { std::ofstream mark(done); }
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
  std::string where_;
  bool used_ = false;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> join_file(const Spec& spec, int rank, int nranks) {
  if (!exists(spec.dir)) {
    return make_error(ErrorCode::kNotFound,
                      fmt::format("bootstrap {}: directory {} does not exist", spec.name(),
                                  spec.dir));
  }
  // The store trusts whoever can write its directory (they could write any rank's file first):
  // a directory anyone may write is refused.
  struct stat st {};
  if (::stat(spec.dir.c_str(), &st) == 0 && (st.st_mode & S_IWOTH) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap {}: directory {} is writable by every user, who "
                                  "could join as any rank; use a directory only the job's "
                                  "users can write (e.g. mkdir -m 0700, or 0770 for a group)",
                                  spec.name(), spec.dir));
  }
  const char* env_host = std::getenv("DETWAN_LISTEN_HOST");
  std::string host = env_host != nullptr && *env_host != '\0' ? env_host : "127.0.0.1";
  return std::make_unique<FileBootstrap>(spec, rank, nranks, std::move(host));
}

}  // namespace detwan::collectives::bootstrap
