// --raw (per-packet CSV) and --plot (gnuplot figure). Both run once after the test; they
// allocate freely and report failures as Result errors that name the file.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/perf/report.h"

extern char** environ;

namespace detwan::perf {

using common::ErrorCode;
using common::make_error;

namespace {

// The correction the report applied to that direction's delays (clock_offset_ns is receiver
// clock - sender clock, so a corrected delay is rx - tx - offset).
int64_t correction_ns(const std::optional<DirectionResult>& r) {
  return r && r->clock_corrected ? r->clock_offset_ns : 0;
}

struct Series {
  std::string title;  // "TARGET forward"
  std::vector<PacketRecord> const* packets;
  int64_t correction_ns;
  int64_t to_client_clock_ns;  // added to tx_ns to put every series on the client's clock
};

std::vector<Series> collect_series(const TestReport& report) {
  std::vector<Series> out;
  for (const PathReport& p : report.paths) {
    if (!p.forward_packets.empty()) {
      out.push_back({p.target + " forward", &p.forward_packets, correction_ns(p.forward), 0});
    }
    if (!p.reverse_packets.empty()) {
      // Reverse packets carry the server's send times; the offset estimate (client - server)
      // moves them onto the client's clock so all panels share one time axis.
      int64_t shift = p.reverse ? p.reverse->clock_offset_ns : 0;
      out.push_back({p.target + " reverse", &p.reverse_packets, correction_ns(p.reverse), shift});
    }
  }
  return out;
}

// The system's message for errno `e`, thread-safely.
std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

// Removes the directory tree on scope exit (the plot's data files and script).
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/detwan-perf-plot-XXXXXX";
    if (mkdtemp(name) != nullptr) path_ = name;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Time series: (seconds since t0, delay ms). Above kMaxTimePoints the span is cut into
// buckets and each keeps its lowest and highest delay, so spikes and the floor stay visible.
constexpr size_t kMaxTimePoints = 20'000;
// CDF points: half spread evenly over [0, 0.99], half log-spaced over the tail down to 1/n.
constexpr size_t kMaxCdfPoints = 2'000;

std::string time_series_data(const Series& s, int64_t t0_ns) {
  struct Point {
    int64_t t_ns;
    int64_t owd_ns;
  };
  std::vector<Point> points;
  points.reserve(s.packets->size());
  for (const PacketRecord& r : *s.packets) {
    points.push_back({r.tx_ns + s.to_client_clock_ns - t0_ns, r.rx_ns - r.tx_ns - s.correction_ns});
  }
  std::sort(points.begin(), points.end(),
            [](const Point& a, const Point& b) { return a.t_ns < b.t_ns; });
  if (points.size() > kMaxTimePoints) {
    const size_t buckets = kMaxTimePoints / 2;
    const int64_t first = points.front().t_ns;
    const double span = static_cast<double>(points.back().t_ns - first) + 1;
    std::vector<Point> kept;
    kept.reserve(kMaxTimePoints);
    size_t i = 0;
    while (i < points.size()) {
      auto bucket_of = [&](const Point& p) {
        return static_cast<size_t>(static_cast<double>(p.t_ns - first) / span *
                                   static_cast<double>(buckets));
      };
      size_t b = bucket_of(points[i]);
      Point lo = points[i], hi = points[i];
      for (; i < points.size() && bucket_of(points[i]) == b; ++i) {
        if (points[i].owd_ns < lo.owd_ns) lo = points[i];
        if (points[i].owd_ns > hi.owd_ns) hi = points[i];
      }
      if (lo.t_ns <= hi.t_ns) {
        kept.push_back(lo);
        if (hi.t_ns != lo.t_ns || hi.owd_ns != lo.owd_ns) kept.push_back(hi);
      } else {
        kept.push_back(hi);
        kept.push_back(lo);
      }
    }
    points = std::move(kept);
  }
  std::string out;
  out.reserve(points.size() * 24);
  for (const Point& p : points) {
    out += fmt::format("{:.9f} {:.6f}\n", static_cast<double>(p.t_ns) / 1e9,
                       static_cast<double>(p.owd_ns) / 1e6);
  }
  return out;
}

// Lines "delay_ms cdf tail": cdf = fraction <= delay, tail = fraction >= delay (never 0, so
// it stays on the log axis; the last point is 1/n).
std::string cdf_data(const Series& s) {
  std::vector<int64_t> owd;
  owd.reserve(s.packets->size());
  for (const PacketRecord& r : *s.packets) owd.push_back(r.rx_ns - r.tx_ns - s.correction_ns);
  std::sort(owd.begin(), owd.end());
  const size_t n = owd.size();
  std::vector<size_t> index;
  if (n <= kMaxCdfPoints) {
    for (size_t i = 0; i < n; ++i) index.push_back(i);
  } else {
    const size_t half = kMaxCdfPoints / 2;
    for (size_t k = 0; k < half; ++k) {
      index.push_back(static_cast<size_t>(0.99 * static_cast<double>(n) * static_cast<double>(k) /
                                          static_cast<double>(half)));
    }
    // tail fraction from 1e-2 down to 1/n, geometrically
    const double lo = std::log(1.0 / static_cast<double>(n));
    const double hi = std::log(1e-2);
    for (size_t k = 0; k <= half; ++k) {
      double tail = std::exp(hi + (lo - hi) * static_cast<double>(k) / static_cast<double>(half));
      auto above = static_cast<size_t>(std::ceil(tail * static_cast<double>(n)));
      index.push_back(n - std::clamp<size_t>(above, 1, n));
    }
    index.push_back(n - 1);
    std::sort(index.begin(), index.end());
    index.erase(std::unique(index.begin(), index.end()), index.end());
  }
  std::string out;
  out.reserve(index.size() * 40);
  const double dn = static_cast<double>(n);
  for (size_t i : index) {
    out += fmt::format("{:.6f} {:.9g} {:.9g}\n", static_cast<double>(owd[i]) / 1e6,
                       static_cast<double>(i + 1) / dn, static_cast<double>(n - i) / dn);
  }
  return out;
}

// gnuplot single-quoted string: '' is the only escape.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

bool write_file(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary);
  f << content;
  f.close();
  return !f.fail();
}

// Colour-blind-safe palette (Okabe-Ito); the same series has the same colour in every panel.
constexpr const char* kColours[] = {"0072B2", "D55E00", "009E73", "CC79A7", "E69F00", "56B4E9"};

// `alpha`: gnuplot's ARGB transparency byte ("00" opaque); points are translucent so one
// series does not hide the other where they overlap.
std::string plot_command(const std::vector<Series>& series, const std::string& dir,
                         const char* file_prefix, const char* columns, const char* style,
                         const char* alpha) {
  std::string cmd = "plot ";
  for (size_t i = 0; i < series.size(); ++i) {
    if (i != 0) cmd += ", \\\n     ";
    cmd += fmt::format("{} using {} with {} lc rgb '#{}{}' title {} noenhanced",
                       quoted(fmt::format("{}/{}{}.dat", dir, file_prefix, i)), columns, style,
                       alpha, kColours[i % std::size(kColours)], quoted(series[i].title));
  }
  return cmd + "\n";
}

// Runs `gnuplot script` with stdout and stderr into `log`; returns the error to report.
common::Result<void> run_gnuplot(const std::string& script, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::string prog = "gnuplot";
  std::vector<char*> argv{prog.data(), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT) {
    return make_error(ErrorCode::kUnavailable,
                      "--plot needs gnuplot (apt-get install gnuplot-nox)");
  }
  if (rc != 0) {
    return make_error(ErrorCode::kIo, "--plot: cannot run gnuplot: " + errno_text(rc));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return make_error(ErrorCode::kInternal, "--plot: waitpid(gnuplot): " + errno_text(errno));
    }
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  std::ifstream f(log);
  std::stringstream text;
  text << f.rdbuf();
  std::string message = text.str();
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (message.size() > 2000) message = "..." + message.substr(message.size() - 2000);
  std::string how = WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                      : fmt::format("signal {}", WTERMSIG(status));
  return make_error(ErrorCode::kIo, fmt::format("--plot: gnuplot failed ({}): {}", how, message));
}

}  // namespace

common::Result<void> write_raw_csv(const TestReport& report, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return make_error(ErrorCode::kIo, "--raw '" + path + "': " + errno_text(errno));
  }
  // Formatted into a buffer and written with fwrite: fmt::print would throw on a write error
  // (a full disk), and this function reports errors as a Result.
  int write_errno = 0;
  std::string buffer = "target,direction,seq,tx_ns,rx_ns,owd_ns\n";
  auto flush = [&] {
    if (write_errno == 0 && std::fwrite(buffer.data(), 1, buffer.size(), f) != buffer.size()) {
      write_errno = errno;
    }
    buffer.clear();
  };
  for (const PathReport& p : report.paths) {
    auto rows = [&](const char* direction, const std::vector<PacketRecord>& packets,
                    int64_t correction) {
      for (const PacketRecord& r : packets) {
        fmt::format_to(std::back_inserter(buffer), "{},{},{},{},{},{}\n", p.target, direction,
                       r.seq, r.tx_ns, r.rx_ns, r.rx_ns - r.tx_ns - correction);
        if (buffer.size() >= 1 << 16) flush();
      }
    };
    rows("forward", p.forward_packets, correction_ns(p.forward));
    rows("reverse", p.reverse_packets, correction_ns(p.reverse));
  }
  flush();
  if (write_errno == 0 && std::fflush(f) != 0) write_errno = errno;
  if (std::fclose(f) != 0 && write_errno == 0) write_errno = errno;
  if (write_errno != 0) {
    return make_error(ErrorCode::kIo, "--raw '" + path + "': " + errno_text(write_errno));
  }
  return {};
}

common::Result<void> write_plot(const TestReport& report, const std::string& path) {
  std::vector<Series> series = collect_series(report);
  if (series.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--plot: no per-packet records were collected");
  }
  const bool png = path.ends_with(".png");
  TempDir dir;
  if (dir.path().empty()) {
    return make_error(ErrorCode::kIo,
                      "--plot: cannot create a directory in /tmp: " + errno_text(errno));
  }
  int64_t t0_ns = std::numeric_limits<int64_t>::max();
  for (const Series& s : series) {
    for (const PacketRecord& r : *s.packets) {
      t0_ns = std::min(t0_ns, r.tx_ns + s.to_client_clock_ns);
    }
  }
  for (size_t i = 0; i < series.size(); ++i) {
    if (!write_file(fmt::format("{}/ts{}.dat", dir.path(), i),
                    time_series_data(series[i], t0_ns)) ||
        !write_file(fmt::format("{}/cdf{}.dat", dir.path(), i), cdf_data(series[i]))) {
      return make_error(ErrorCode::kIo, "--plot: cannot write data files in " + dir.path());
    }
  }
  std::string script;
  script += png ? "set terminal pngcairo size 1000,900 noenhanced\n"
                : "set terminal svg size 1000,900 dynamic noenhanced background rgb 'white'\n";
  script += "set output " + quoted(path) + "\n";
  script += "set multiplot layout 3,1 title 'detwan-perf one-way delay'\n";
  script += "set grid\n";
  script += "set title 'one-way delay over time'\n";
  script += "set key top right opaque box\n";
  script += "set xlabel 'time (s since the first packet)'\nset ylabel 'delay (ms)'\n";
  script += plot_command(series, dir.path(), "ts", "1:2", "points pt 7 ps 0.3", "60");
  script += "set title 'delay CDF'\nset key bottom right opaque box\n";
  script += "set xlabel 'one-way delay (ms)'\nset ylabel 'fraction <= delay'\n";
  script += "set yrange [0:1]\n";
  script += plot_command(series, dir.path(), "cdf", "1:2", "steps lw 1.5", "00");
  script += "set title 'tail: fraction of packets with delay >= x (log)'\n";
  script += "set key top right opaque box\n";
  script += "set ylabel 'fraction >= delay'\nset logscale y\nset yrange [1e-5:1]\n";
  script +=
      "set ytics ('1' 1, '0.1 (p90)' 0.1, '0.01 (p99)' 0.01, '1e-3 (p99.9)' 0.001, "
      "'1e-4 (p99.99)' 0.0001, '1e-5 (p99.999)' 0.00001)\n";
  script += plot_command(series, dir.path(), "cdf", "1:3", "steps lw 1.5", "00");
  script += "unset multiplot\nset output\n";
  const std::string script_path = dir.path() + "/plot.gp";
  if (!write_file(script_path, script)) {
    return make_error(ErrorCode::kIo, "--plot: cannot write " + script_path);
  }
  if (auto r = run_gnuplot(script_path, dir.path() + "/gnuplot.log"); !r) return r;
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 || ec) {
    return make_error(ErrorCode::kIo, "--plot '" + path + "': gnuplot wrote no figure");
  }
  return {};
}

}  // namespace detwan::perf
