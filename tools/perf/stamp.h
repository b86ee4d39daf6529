#pragma once
// STAMP (RFC 8762) in unauthenticated mode, with the RFC 8972 session id (SSID):
//   run_stamp_reflect: Session-Reflector, stateless or stateful.
//   run_stamp_sender:  Session-Sender; prints round trip, both one-way delays, loss per
//                      direction (stateful reflectors) and the DSCP seen.
// Both return the process exit status (0 ok, 1 failure, 2 bad arguments).
#include "tools/perf/options.h"

namespace detwan::perf {

int run_stamp_reflect(const StampReflectOptions& options);
int run_stamp_sender(const StampSenderOptions& options);

}  // namespace detwan::perf
