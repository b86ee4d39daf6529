#include "common/logging.h"

#include <array>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace detwan::common {
namespace {

struct LevelName {
  std::string_view name;
  spdlog::level::level_enum level;
};

constexpr std::array<LevelName, 7> kLevels = {{
    {"trace", spdlog::level::trace},
    {"debug", spdlog::level::debug},
    {"info", spdlog::level::info},
    {"warn", spdlog::level::warn},
    {"error", spdlog::level::err},
    {"critical", spdlog::level::critical},
    {"off", spdlog::level::off},
}};

std::optional<spdlog::level::level_enum> level_from_name(std::string_view name) {
  for (const LevelName& entry : kLevels) {
    if (entry.name == name) return entry.level;
  }
  if (name == "warning") return spdlog::level::warn;
  return std::nullopt;
}

// '%' starts a flag in spdlog patterns.
std::string escape_pattern(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '%') out += '%';
    out += c;
  }
  return out;
}

// Serialises logger creation: spdlog's registry throws when a name is registered twice.
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

Result<void> init_logging(std::string_view program, const LogOptions& options) {
  const auto level = level_from_name(options.level);
  if (!level) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("unknown log level '{}' (use trace, debug, info, warn, error, "
                                  "critical, off)",
                                  options.level));
  }

  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!options.file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.file));
    } catch (const spdlog::spdlog_ex& e) {
      return make_error(ErrorCode::kIo,
                        fmt::format("cannot open log file '{}': {}", options.file, e.what()));
    }
  }

  // The JSON form does not escape the message; it is meant for line-oriented collectors.
  const std::string pattern =
      options.json
          ? fmt::format(R"({{"time":"%Y-%m-%dT%H:%M:%S.%f%z","program":"{}","logger":"%n",)"
                        R"("level":"%l","thread":%t,"msg":"%v"}})",
                        escape_pattern(program))
          : std::string("[%Y-%m-%d %H:%M:%S.%f] [%n] [%^%l%$] %v");

  std::lock_guard lock(registry_mutex());
  auto default_logger =
      std::make_shared<spdlog::logger>(std::string(program), sinks.begin(), sinks.end());
  default_logger->set_level(*level);
  default_logger->set_pattern(pattern);
  default_logger->flush_on(spdlog::level::warn);
  spdlog::drop(std::string(program));
  spdlog::set_default_logger(default_logger);

  // Loggers created before init (logger("x") at static setup) move to the new sinks too.
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& existing) {
    if (existing == default_logger) return;
    existing->sinks() = sinks;
    existing->set_level(*level);
    existing->set_pattern(pattern);
    existing->flush_on(spdlog::level::warn);
  });
  return {};
}

std::shared_ptr<spdlog::logger> logger(std::string_view name) {
  const std::string key(name);
  std::lock_guard lock(registry_mutex());
  if (auto existing = spdlog::get(key)) return existing;
  auto created = spdlog::default_logger()->clone(key);
  spdlog::register_logger(created);
  return created;
}

}  // namespace detwan::common
