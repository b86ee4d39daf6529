#pragma once
// A daemon under systemd (Type=notify; packaging/systemd): tells the service manager when it is
// ready, reloading or stopping, and pings its watchdog, through libsystemd's sd_notify. Without
// NOTIFY_SOCKET (not started by systemd) every call does nothing.
//
// Watchdog: when the unit sets WatchdogSec, systemd passes WATCHDOG_USEC (and WATCHDOG_PID) and
// kills the service unless it hears WATCHDOG=1 within that interval. heartbeat(now) is called
// from the daemon's main loop -- where a hung loop stops calling it -- and pings every half
// interval.
//
// Threading: one thread (the daemon's main loop) calls it.
#include <atomic>
#include <cstdint>
#include <string_view>

namespace detwan::common {

class ServiceNotifier {
 public:
  ServiceNotifier();  // reads NOTIFY_SOCKET and the watchdog's interval from the environment

  [[nodiscard]] bool active() const { return active_; }
  // 0: no watchdog asked for.
  [[nodiscard]] int64_t watchdog_interval_ns() const { return watchdog_ns_; }

  void ready(std::string_view status);     // READY=1 (once serving), STATUS=...
  void reloading(std::string_view status); // RELOADING=1 (ready() again when done)
  void stopping(std::string_view status);  // STOPPING=1
  void status(std::string_view status);    // STATUS=... only
  // WATCHDOG=1 when half the interval has passed since the last ping (or none was sent yet).
  void heartbeat(int64_t now_ns);

  [[nodiscard]] uint64_t sent() const { return sent_.load(); }  // notifications sent (tests)

 private:
  void send(std::string_view state, std::string_view status);

  bool active_ = false;
  int64_t watchdog_ns_ = 0;
  int64_t last_ping_ns_ = INT64_MIN;
  std::atomic<uint64_t> sent_{0};  // ready/reloading may come from another thread than pings
};

}  // namespace detwan::common
