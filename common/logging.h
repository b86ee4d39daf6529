#pragma once
// spdlog setup. Libraries log through a named logger (`logger("wanem")`); programs call
// init_logging() once in main(). No logging per packet: datapaths count, tools print counters.
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace detwan::common {

struct LogOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  bool json = false;           // one JSON object per line instead of text
  std::string file;            // also log to this file when non-empty
};

// Installs the default sink and pattern for this process. Returns an error for an unknown level.
Result<void> init_logging(std::string_view program, const LogOptions& options);

// A named logger sharing the process sinks (created on first use).
std::shared_ptr<spdlog::logger> logger(std::string_view name);

}  // namespace detwan::common
