#pragma once
// detwan-gw run: the configuration reloaded on SIGHUP (systemd's ExecReload; docs/gateway.md,
// "Reloading the configuration"). A thread of its own waits for the signal, then asks the loop
// {"cmd":"reload"} as a local admin request of the control server (ControlServer::submit), so
// the file is read and its tunnel changes applied on the loop's thread between two polls, like
// any apply (a sharded gateway's shards too). systemd hears RELOADING=1, then READY=1 with the
// outcome in STATUS; the log says what changed or why nothing did.
//
// Threading: start() and the destructor on the main thread; the destructor joins the thread and
// must run before the control server is destroyed.
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/service_notify.h"
#include "dataplane/gw/control_server.h"

namespace detwan::dataplane::daemon {

// Set by SIGHUP (install_signal_handlers); the reloader takes it.
std::atomic<bool>& reload_requested();

class Reloader {
 public:
  Reloader(gw::ControlServer& control, common::ServiceNotifier& notifier, std::string ready_status,
           std::string source);
  ~Reloader();
  Reloader(const Reloader&) = delete;
  Reloader& operator=(const Reloader&) = delete;

 private:
  void run();
  void reload_once();

  gw::ControlServer& control_;
  common::ServiceNotifier& notifier_;
  std::string ready_status_;
  std::string source_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace detwan::dataplane::daemon
