#pragma once
// One request line over a Unix stream socket and the whole answer (the line protocol of
// detwan-gw's and detwan-wanem's control sockets: the server answers and closes), and the
// socket address both sides build from a name.
// Setup tier: blocking with a deadline; errors name the socket (and the server, when given):
//   kUnavailable "nothing listens on /run/x.sock: Connection refused"
//                "no detwan-gw listening on @detwan-gw: Connection refused"
//   kTimeout     "no answer from /run/x.sock within 5000 ms"
//                "no answer from detwan-gw on @detwan-gw within 5000 ms"
#include <cstddef>
#include <string>
#include <string_view>

#include <sys/socket.h>
#include <sys/un.h>

#include "common/status.h"

namespace detwan::common {

// A sockaddr_un for a filesystem path or an "@name" (abstract), with its exact length.
struct UnixAddress {
  sockaddr_un address{};
  socklen_t length = 0;
  bool abstract = false;
  [[nodiscard]] const sockaddr* get() const noexcept {
    return reinterpret_cast<const sockaddr*>(&address);
  }
};
// kInvalidArgument "socket 'x': the path must be 1..107 characters" for an empty or long name.
Result<UnixAddress> unix_address(std::string_view name);

inline constexpr size_t kUnixAnswerLimitBytes = size_t{64} << 20;

// `socket`: a filesystem path or "@name" (abstract). Sends `request` plus '\n', reads until the
// server closes, returns the answer without a trailing newline. A server that answers and
// closes without reading the request (a refused peer) still has its answer returned.
// `max_answer_bytes` bounds what a misbehaving server can make the caller buffer. `server`
// ("detwan-gw") names what should listen there, in errors.
Result<std::string> unix_request(std::string_view socket, std::string_view request, int timeout_ms,
                                 size_t max_answer_bytes = kUnixAnswerLimitBytes,
                                 std::string_view server = {});

}  // namespace detwan::common
