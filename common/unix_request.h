#pragma once
// One request line over a Unix stream socket and the whole answer (the line protocol of
// detwan-gw's and detwan-wanem's control sockets: the server answers and closes).
// Setup tier: blocking with a deadline; errors name the socket:
//   kUnavailable "nothing listens on /run/x.sock: Connection refused"
//   kTimeout     "no answer on /run/x.sock within 5000 ms"
#include <string>
#include <string_view>

#include "common/status.h"

namespace detwan::common {

// `socket`: a filesystem path or "@name" (abstract). Sends `request` plus '\n', reads until the
// server closes, returns the answer without a trailing newline. `max_answer_bytes` bounds what
// a misbehaving server can make the caller buffer.
Result<std::string> unix_request(std::string_view socket, std::string_view request, int timeout_ms,
                                 size_t max_answer_bytes = 64u << 20);

}  // namespace detwan::common
