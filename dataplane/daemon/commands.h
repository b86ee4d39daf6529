#pragma once
// detwan-gw's subcommands that talk to a running gateway (client_commands.cc), and what they
// share with main.cc: exit statuses (docs/errors.md), the stop flag and the error printer.
#include <atomic>
#include <string>

#include "common/status.h"

namespace detwan::dataplane::daemon {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;  // bad configuration or command line

// Set by SIGINT/SIGTERM (install_signal_handlers, which also ignores SIGPIPE).
std::atomic<bool>& stop_requested();
void install_signal_handlers();
// "detwan-gw: MESSAGE" on stderr; returns `code`.
int fail(const common::Error& error, int code);

// `stats [--json | --prometheus]`: one answer of the control socket `control`.
int command_stats(const std::string& control, bool json, bool prometheus);
// `stats --watch SECONDS [--count N]`: what changed each interval, until SIGINT/SIGTERM or N.
int command_watch(const std::string& control, double seconds, int count);
// `tunnels [--json]`.
int command_tunnels(const std::string& control, bool json);
// `apply (JSON | @FILE | -)` on an admin socket.
int command_apply(const std::string& control, const std::string& argument);

}  // namespace detwan::dataplane::daemon
