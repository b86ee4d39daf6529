// detwan-perf client: opens the path(s), runs the shared forward sender and one loop per path
// (client_loop.cc), then assembles and prints the report.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tools/perf/client_path.h"
#include "tools/perf/session.h"

namespace detwan::perf {
namespace json = boost::json;

namespace {

constexpr int kInitialSyncExchanges = 8;
constexpr int64_t kStartLeadNs = 50'000'000;  // start messages reach every server first

// When the server's result never came: what its interval records saw, so the report still
// shows how far the test got.
DirectionResult forward_from_intervals(const PathReport& report) {
  DirectionResult f;
  for (const DirectionResult& i : report.forward_intervals) {
    f.received += i.received;
    f.reordered += i.reordered;
    f.duplicates += i.duplicates;
    f.malformed += i.malformed;
    f.beyond_bound += i.beyond_bound;
    f.received_bytes += i.received_bytes;
  }
  if (!report.forward_intervals.empty()) {
    f.start_ns = report.forward_intervals.front().start_ns;
    f.end_ns = report.forward_intervals.back().end_ns;
  }
  return f;
}

}  // namespace

void finish_path(ClientPath& path, const ClientContext& context) {
  const ClientOptions& options = context.options;
  const TestSpec& spec = options.spec;
  const ClockSync& clock = path.clock;
  const int64_t corr = clock.correction_ns(options.clock);
  const bool corrected = clock.valid() && (corr != 0 || options.clock == ClockMode::kEstimate);
  const Distribution rtt = summarize(clock.rtt());
  // Offsets are receiver clock - sender clock; ClockSync's is server - client.
  auto stamp = [&](DirectionResult& r, bool forward) {
    r.rtt_ns = rtt;
    r.clock_offset_ns = forward ? clock.offset_ns() : -clock.offset_ns();
    r.clock_error_ns = clock.error_ns();
    r.clock_corrected = corrected;
  };
  const int64_t end_ns = std::min(realtime_ns(), context.start_ns + spec.duration_ns);
  PathReport& report = path.report;

  if (path.ping_forward) {
    report.forward = path.ping_forward->result(corr, context.start_ns, end_ns);
    report.reverse = path.ping_reverse->result(-corr, context.start_ns, end_ns);
    stamp(*report.forward, true);
    stamp(*report.reverse, false);
    return;
  }
  if (sends_forward(spec)) {
    DirectionResult f;
    bool have = false;
    if (const json::value* v = path.result.if_contains("forward")) {
      if (auto parsed = direction_from_json(*v)) {
        f = *parsed;
        have = true;
      } else if (report.error.empty()) {
        report.error =
            "server " + path.target + ": unreadable forward result: " + parsed.error().message;
      }
    }
    if (!have) f = forward_from_intervals(report);
    // The sender's own counts: exact even when the server's result is missing.
    f.sent = context.sender_outcome.sent;
    if (!have && f.sent >= f.received) f.lost = f.sent - f.received;
    f.schedule_error_ns = summarize(path.forward_sender.schedule_error());
    stamp(f, true);
    report.forward = f;
  }
  if (sends_reverse(spec) && path.reverse) {
    DirectionResult sender_side;
    bool have_sender = false;
    if (const json::value* v = path.result.if_contains("reverse_sender")) {
      if (auto parsed = direction_from_json(*v)) {
        sender_side = *parsed;
        have_sender = true;
        path.reverse->set_sent(sender_side.sent);
      }
    }
    const int64_t start =
        have_sender && sender_side.start_ns != 0 ? sender_side.start_ns : context.start_ns;
    const int64_t end = have_sender && sender_side.end_ns > start ? sender_side.end_ns : end_ns;
    DirectionResult r = path.reverse->result(-corr, start, end);
    if (have_sender) r.schedule_error_ns = sender_side.schedule_error_ns;
    stamp(r, false);
    report.reverse = r;
  }
}

common::Result<TestReport> run_test(const ClientOptions& options, const IntervalSink& sink,
                                    const std::atomic<bool>* stop) {
  std::vector<std::unique_ptr<ClientPath>> paths;
  for (const std::string* host : {&options.host, &options.compare_host}) {
    if (host->empty()) continue;
    auto path = open_path(options, *host);
    if (!path) return std::unexpected(path.error());
    paths.push_back(std::move(*path));
  }
  if (paths.empty()) {
    return common::make_error(common::ErrorCode::kInvalidArgument, "no server address given");
  }
  for (auto& path : paths) {
    if (auto synced = initial_sync(*path, options, kInitialSyncExchanges); !synced) {
      return std::unexpected(synced.error());
    }
  }

  ClientContext context{options, sink};
  context.stop = stop;
  context.start_ns = realtime_ns() + kStartLeadNs;
  for (auto& path : paths) {
    json::object start = clock_message("start", path->clock, options.clock);
    start["start_ns"] = context.start_ns;
    if (auto sent = path->control.send(start); !sent) {
      return common::make_error(common::ErrorCode::kUnavailable,
                                "server " + path->target + ": " + sent.error().message);
    }
  }

  // Senders watch `abort`: the external stop, or every path gone (nothing left to send to).
  std::atomic<bool> abort{false};
  std::thread sender;
  if (sends_forward(options.spec)) {
    sender = std::thread([&] {
      std::vector<StreamTarget> targets;
      for (auto& path : paths) {
        targets.push_back(StreamTarget{path->udp->fd(), nullptr, 0, path->session,
                                       &path->forward_sender, &path->alive});
      }
      context.sender_outcome = run_stream_sender(options.spec, max_packets_for(options.spec),
                                                 context.start_ns, targets, abort);
      context.sender_done.store(true, std::memory_order_release);
    });
  }
  std::vector<std::thread> loops;
  for (auto& path : paths) {
    loops.emplace_back([&context, p = path.get()] { run_path(*p, context); });
  }
  // The main thread relays the external stop to the sender; loops see it themselves.
  for (;;) {
    bool any_alive = false;
    for (auto& path : paths) any_alive = any_alive || path->alive.load();
    if (!any_alive || (stop != nullptr && stop->load())) abort.store(true);
    if (!any_alive) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& loop : loops) loop.join();
  abort.store(true);
  if (sender.joinable()) sender.join();

  TestReport report;
  report.spec = options.spec;
  report.clock = options.clock;
  report.start_realtime_ns = context.start_ns;
  for (auto& path : paths) {
    finish_path(*path, context);
    report.paths.push_back(std::move(path->report));
  }
  return report;
}

namespace {

std::atomic<bool> g_client_stop{false};  // SIGINT/SIGTERM in run_client only

void on_client_signal(int /*signum*/) { g_client_stop.store(true); }

}  // namespace

int run_client(const ClientOptions& options) {
  struct sigaction sa {};
  sa.sa_handler = on_client_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  IntervalSink sink;
  if (options.json_stream) {
    sink = [](const std::string& target, const char* direction, const DirectionResult& r) {
      std::fprintf(stdout, "%s\n", interval_line(target, direction, r).c_str());
      std::fflush(stdout);
    };
  } else if (!options.json) {
    // The text report: a live line per interval and direction while the test runs, then the
    // table. The first interval's start is the origin of the spans.
    auto origin = std::make_shared<int64_t>(0);
    sink = [origin](const std::string& target, const char* direction, const DirectionResult& r) {
      if (*origin == 0) *origin = r.start_ns;
      std::fprintf(stdout, "%s\n", interval_text(target, direction, r, *origin).c_str());
      std::fflush(stdout);
    };
  }
  auto report = run_test(options, sink, &g_client_stop);
  if (!report) {
    std::fprintf(stderr, "detwan-perf: %s\n", report.error().message.c_str());
    return report.error().code == common::ErrorCode::kInvalidArgument ? 2 : 1;
  }
  int status = 0;
  for (const PathReport& path : report->paths) {
    if (!path.error.empty()) {
      std::fprintf(stderr, "detwan-perf: %s\n", path.error.c_str());
      status = 1;
    }
  }
  if (options.json_stream) {
    std::fprintf(stdout, "%s\n", summary_line(*report).c_str());
  } else if (options.json) {
    std::fprintf(stdout, "%s\n", to_json(*report).c_str());
  } else {
    print_table(*report, stdout);
  }
  std::fflush(stdout);
  if (!options.json_path.empty()) {
    std::FILE* file = std::fopen(options.json_path.c_str(), "w");
    const std::string document = to_json(*report) + "\n";
    if (file == nullptr ||
        std::fwrite(document.data(), 1, document.size(), file) != document.size()) {
      std::fprintf(stderr, "detwan-perf: --json-file %s: %s\n", options.json_path.c_str(),
                   std::strerror(errno));
      status = 1;
    }
    if (file != nullptr && std::fclose(file) != 0 && status == 0) {
      std::fprintf(stderr, "detwan-perf: --json-file %s: %s\n", options.json_path.c_str(),
                   std::strerror(errno));
      status = 1;
    }
  }
  if (!options.raw_path.empty()) {
    if (auto written = write_raw_csv(*report, options.raw_path); !written) {
      std::fprintf(stderr, "detwan-perf: --raw %s: %s\n", options.raw_path.c_str(),
                   written.error().message.c_str());
      status = 1;
    }
  }
  if (!options.plot_path.empty()) {
    if (auto written = write_plot(*report, options.plot_path); !written) {
      std::fprintf(stderr, "detwan-perf: --plot %s: %s\n", options.plot_path.c_str(),
                   written.error().message.c_str());
      status = 1;
    }
  }
  return status;
}

}  // namespace detwan::perf
