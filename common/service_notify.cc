#include "common/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <string>

#include "common/logging.h"

namespace detwan::common {

ServiceNotifier::ServiceNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  active_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  // > 0: the watchdog is on for this process (WATCHDOG_PID, when set, names it).
  if (active_ && sd_watchdog_enabled(0, &usec) > 0) {
    watchdog_ns_ = static_cast<int64_t>(usec) * 1000;
  }
}

void ServiceNotifier::send(std::string_view state, std::string_view status) {
  if (!active_) return;
  std::string message(state);
  if (!status.empty()) {
    if (!message.empty()) message += '\n';
    message += "STATUS=";
    message += status;
  }
  const int rc = sd_notify(0, message.c_str());
  if (rc > 0) {
    ++sent_;
  } else if (rc < 0) {
    logger("service")->warn("sd_notify '{}': error {}", state, -rc);
  }
}

void ServiceNotifier::ready(std::string_view status) { send("READY=1", status); }
void ServiceNotifier::reloading(std::string_view status) { send("RELOADING=1", status); }
void ServiceNotifier::stopping(std::string_view status) { send("STOPPING=1", status); }
void ServiceNotifier::status(std::string_view status) { send("", status); }

void ServiceNotifier::heartbeat(int64_t now_ns) {
  if (watchdog_ns_ <= 0) return;
  if (last_ping_ns_ != INT64_MIN && now_ns - last_ping_ns_ < watchdog_ns_ / 2) return;
  last_ping_ns_ = now_ns;
  send("WATCHDOG=1", "");
}

}  // namespace detwan::common
