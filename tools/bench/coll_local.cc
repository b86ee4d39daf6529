#include "tools/bench/coll_local.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "tools/bench/coll_report.h"

namespace detwan::bench {
namespace {

namespace fs = std::filesystem;

// After one rank failed, the others get this long to notice and report before being killed.
constexpr int64_t kGraceNs = 5'000'000'000;

// 128 bits from the kernel's CSPRNG as 32 hex digits; "" if getrandom fails.
std::string random_secret() {
  unsigned char bytes[16];
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) return "";
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Rank {
  pid_t pid = -1;
  std::optional<int> status;  // exit status (128 + signal when killed)
};

// The children, their rank-0 output and the signals that concern them.
class Launcher {
 public:
  explicit Launcher(const CollBenchOptions& o) : o_(o) {}
  ~Launcher() {
    kill_all(SIGKILL);
    reap(true);
    if (pipe_read_ >= 0) ::close(pipe_read_);
    if (signal_fd_ >= 0) ::close(signal_fd_);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  int run(int argc, char** argv) {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return fail(fmt::format("cannot find my own binary: {}", ec.message()));
    char tmpl[] = "/tmp/detwan-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      return fail(fmt::format("mkdtemp for the bootstrap: {}", std::strerror(errno)));
    }
    dir_ = tmpl;
    // The rendezvous' secret goes to the ranks through their environment (inherited), never
    // on a command line that `ps` shows to every user.
    const std::string secret = random_secret();
    if (secret.empty()) return fail(fmt::format("getrandom: {}", std::strerror(errno)));
    ::setenv("DETWAN_BOOTSTRAP_SECRET", secret.c_str(), 1);
    const std::string id = "file://" + dir_.string();

    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&mask, s);
    ::sigprocmask(SIG_BLOCK, &mask, &old_mask_);
    signal_fd_ = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    int fds[2];
    if (signal_fd_ < 0 || ::pipe2(fds, O_CLOEXEC) != 0) {
      return fail(fmt::format("signalfd/pipe: {}", std::strerror(errno)));
    }
    pipe_read_ = fds[0];

    std::vector<std::string> args(argv + 1, argv + argc);
    ranks_.resize(static_cast<size_t>(o_.local_ranks));
    for (int r = 0; r < o_.local_ranks; ++r) {
      auto child_args = local_rank_args(args, o_, r, id);
      child_args.insert(child_args.begin(), exe.string());
      const pid_t pid = spawn(exe, child_args, r == 0 ? fds[1] : STDERR_FILENO);
      if (pid < 0) {
        ::close(fds[1]);
        return fail(fmt::format("fork for rank {}: {}", r, std::strerror(errno)));
      }
      ranks_[static_cast<size_t>(r)].pid = pid;
    }
    ::close(fds[1]);
    return supervise();
  }

 private:
  pid_t spawn(const fs::path& exe, std::vector<std::string>& args, int stdout_fd) {
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    // Child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    if (::dup2(stdout_fd, STDOUT_FILENO) < 0) ::_exit(127);
    ::execv(exe.c_str(), cargs.data());
    ::_exit(127);
  }

  int supervise() {
    const int64_t deadline_ns = now_ns() + static_cast<int64_t>(o_.timeout_s * 1e9);
    int64_t kill_at_ns = -1;
    bool pipe_open = true;
    while (running() > 0 || pipe_open) {
      const int64_t now = now_ns();
      if (now >= deadline_ns && !error_) {
        error_ = fmt::format("timed out after {:g} s: killed every rank", o_.timeout_s);
        kill_all(SIGKILL);
      }
      if (kill_at_ns >= 0 && now >= kill_at_ns) {
        kill_all(SIGKILL);
        kill_at_ns = -1;
      }
      pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {pipe_open ? pipe_read_ : -1, POLLIN, 0}};
      const int64_t wake_ns = kill_at_ns >= 0 ? std::min(kill_at_ns, deadline_ns) : deadline_ns;
      const int timeout_ms = static_cast<int>(
          std::clamp<int64_t>((wake_ns - now) / 1'000'000 + 1, 1, 1000));
      if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) {
        error_ = fmt::format("poll: {}", std::strerror(errno));
        kill_all(SIGKILL);
        break;
      }
      if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) pipe_open = read_output();
      if ((fds[0].revents & POLLIN) != 0) {
        if (const int sig = drain_signals(); sig != 0) {
          error_ = fmt::format("interrupted by signal {}: killed every rank", sig);
          interrupted_ = sig;
          kill_all(SIGKILL);
        }
      }
      reap(false);
      if (kill_at_ns < 0 && running() > 0 && first_failure() && !error_) {
        kill_at_ns = now_ns() + kGraceNs;
      }
      if (running() == 0 && !pipe_open) break;
    }
    reap(true);
    return finish();
  }

  // Forwards (table) or keeps (JSON) what rank 0 wrote; false at end of file.
  bool read_output() {
    char buf[65536];
    const ssize_t got = ::read(pipe_read_, buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (got <= 0) return false;
    if (o_.json) {
      output_.append(buf, static_cast<size_t>(got));
    } else {
      std::fwrite(buf, 1, static_cast<size_t>(got), stdout);
      std::fflush(stdout);
    }
    return true;
  }

  int drain_signals() {
    int stop = 0;
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo != SIGCHLD) stop = static_cast<int>(info.ssi_signo);
    }
    return stop;
  }

  void reap(bool block) {
    for (auto& rank : ranks_) {
      if (rank.pid < 0 || rank.status) continue;
      int status = 0;
      const pid_t got = ::waitpid(rank.pid, &status, block ? 0 : WNOHANG);
      if (got == rank.pid) {
        rank.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      } else if (got < 0 && errno != EINTR) {
        rank.status = 127;
      }
    }
  }

  void kill_all(int sig) {
    for (auto& rank : ranks_) {
      if (rank.pid > 0 && !rank.status) ::kill(rank.pid, sig);
    }
  }

  int running() const {
    int n = 0;
    for (const auto& rank : ranks_) n += rank.pid > 0 && !rank.status ? 1 : 0;
    return n;
  }

  std::optional<size_t> first_failure() const {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].status && *ranks_[r].status != 0) return r;
    }
    return std::nullopt;
  }

  int finish() {
    std::string failures;
    int status = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const int s = ranks_[r].status.value_or(127);
      if (s == 0) continue;
      if (status == 0) status = s >= 128 ? 1 : s;
      failures += fmt::format("{}rank {} {}", failures.empty() ? "" : ", ", r,
                              s >= 128 ? fmt::format("killed by signal {}", s - 128)
                                       : fmt::format("exited {}", s));
    }
    if (!failures.empty()) {
      std::fprintf(stderr, "detwan-bench %s --local: %s\n", o_.collective_name.c_str(),
                   failures.c_str());
    }
    if (error_) {
      std::fprintf(stderr, "detwan-bench %s --local: %s\n", o_.collective_name.c_str(),
                   error_->c_str());
      if (status == 0) status = 1;
    }
    if (interrupted_ != 0) status = 128 + interrupted_;
    if (o_.json) print_json_output(failures);
    return status;
  }

  void print_json_output(const std::string& failures) {
    boost::system::error_code ec;
    auto value = boost::json::parse(output_, ec);
    if (!ec && value.is_object()) {
      auto& doc = value.as_object();
      if (error_ && doc["error"].is_null()) doc["error"] = *error_;
      print_report_json(doc);
      return;
    }
    RunInfo info;
    info.collective = o_.collective_name;
    info.nranks = o_.local_ranks;
    std::string why = error_.value_or("rank 0 printed no report");
    if (!failures.empty()) why += " (" + failures + ")";
    print_report_json(report_json(info, {}, why));
  }

  int fail(const std::string& message) {
    std::fprintf(stderr, "detwan-bench %s --local: %s\n", o_.collective_name.c_str(),
                 message.c_str());
    if (o_.json) {
      RunInfo info;
      info.collective = o_.collective_name;
      info.nranks = o_.local_ranks;
      print_report_json(report_json(info, {}, message));
    }
    return 1;
  }

  const CollBenchOptions& o_;
  fs::path dir_;
  sigset_t old_mask_{};
  int signal_fd_ = -1;
  int pipe_read_ = -1;
  std::vector<Rank> ranks_;
  std::string output_;
  std::optional<std::string> error_;
  int interrupted_ = 0;
};

bool is_option(const std::string& arg, std::string_view name, bool& takes_next) {
  if (arg == name) {
    takes_next = true;
    return true;
  }
  takes_next = false;
  return arg.size() > name.size() && arg.compare(0, name.size(), name) == 0 &&
         arg[name.size()] == '=';
}

}  // namespace

std::vector<std::string> local_rank_args(const std::vector<std::string>& args,
                                         const CollBenchOptions& o, int rank,
                                         const std::string& id) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    bool takes_next = false;
    bool drop = false;
    for (std::string_view name : {"--local", "--sites", "--site-sizes", "--timeout"}) {
      if (is_option(args[i], name, takes_next)) {
        drop = true;
        break;
      }
    }
    if (!drop) {
      out.push_back(args[i]);
    } else if (takes_next) {
      ++i;
    }
  }
  out.insert(out.end(), {"--rank", std::to_string(rank), "--nranks", std::to_string(o.local_ranks),
                         "--id", id, "--site", local_site_name(rank, o.local_ranks, o.local_sites,
                                                         o.local_site_sizes)});
  if (o.listen_host.empty()) out.insert(out.end(), {"--listen-host", "127.0.0.1"});
  return out;
}

int run_local(const CollBenchOptions& options, int argc, char** argv) {
  Launcher launcher(options);
  return launcher.run(argc, argv);
}

}  // namespace detwan::bench
