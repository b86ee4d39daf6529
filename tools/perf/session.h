#pragma once
// detwan-perf client and server: a TCP control connection negotiates the test (JSON lines,
// docs/perf.md), then UDP test streams run in the asked directions while sync exchanges (10/s)
// measure RTT and the clock offset. Results of the server's receiving side come back on the
// control connection. Both return the process exit status: 0 complete, 1 partial or failed
// (a vanished peer: a clear message and the results so far), 2 bad arguments.
#include "tools/perf/options.h"

namespace detwan::perf {

int run_client(const ClientOptions& options);
int run_server(const ServerOptions& options);

}  // namespace detwan::perf
