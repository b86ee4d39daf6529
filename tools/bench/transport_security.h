#pragma once
// The transport benchmarks' security flags (docs/transport.md "Authenticated channels"):
//   --key-file PATH   the job's 32-byte key: 32 raw bytes or 64 hex digits (whitespace after
//                     them ignored); the file must not be readable by group or others
//   --encrypt         encrypt payloads too (SecurityMode::kEncrypt; default: authenticate only)
//   --insecure        unauthenticated channels (SecurityMode::kNone), asked for by name
// Without --key-file or --insecure, send and recv refuse to run (secure by default).
#include <string>

#include "common/status.h"
#include "transport/security.h"

namespace detwan::bench {

struct SecurityFlags {
  std::string key_file;
  bool encrypt = false;
  bool insecure = false;
};

// The endpoint's Security for these flags; kInvalidArgument naming the flag or the file's
// problem (missing key, unreadable, wrong size, group/world-readable, contradictory flags).
common::Result<transport::Security> security_from(const SecurityFlags& flags);

// Two ends in one process (pingpong, info): a fresh random key, in the flags' mode.
common::Result<transport::Security> in_process_security(const SecurityFlags& flags);

// The key file's contents as a key (exposed for tests).
common::Result<transport::SecurityKey> read_key_file(const std::string& path);

}  // namespace detwan::bench
