#pragma once
// Packet I/O backends of detwan-wanem, chosen by name from a small table (backend.cc).
//
// A backend opens its port from RunOptions (setup: port.cc of its folder), then runs the
// templated forwarding loop on it (port_datapath.cc) until the stop flag is set or the duration
// ends. Meson compiles a backend's folder only when its SDK is present; otherwise a fallback
// (dpdk/absent.cc) makes available() return false and run() say how to enable it.
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

#include "common/status.h"
#include "tools/wanem/options.h"
#include "tools/wanem/post_queue.h"

namespace detwan::wanem {

// What every backend's run() receives. All references outlive the call.
struct BackendRun {
  const RunOptions& options;
  const std::atomic<bool>& stop;  // set by the signal thread; run() returns soon after
  PostQueue& posts;               // control requests for the poll thread
  std::shared_ptr<spdlog::logger> log;
};

struct RunOutcome {
  std::string final_stats_json;  // the `stats` JSON at the moment forwarding stopped
};

// Blocks on the calling thread (which becomes the poll thread) until stop or duration.
// Setup errors (unknown interface, EAL failure, no permission) come back as Result errors;
// ErrorCode::kConfig / kNotFound / kInvalidArgument mean "bad settings" (exit status 2).
using BackendRunFn = common::Result<RunOutcome> (*)(const BackendRun&);

struct BackendEntry {
  std::string_view name;
  std::string_view summary;
  bool (*available)();
  BackendRunFn run;
};

[[nodiscard]] std::span<const BackendEntry> backends() noexcept;
[[nodiscard]] const BackendEntry* find_backend(std::string_view name) noexcept;

namespace packet {
bool available();
common::Result<RunOutcome> run(const BackendRun& run);
}  // namespace packet

namespace dpdk {
bool available();
common::Result<RunOutcome> run(const BackendRun& run);
}  // namespace dpdk

}  // namespace detwan::wanem
