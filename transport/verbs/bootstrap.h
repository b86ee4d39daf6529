#pragma once
// The verbs backend's bootstrap: a plain TCP connection over which both sides exchange their
// QpInfo (magic "DWV1", qpn, psn, lid, gid, limits) before the RC QP is connected. The socket
// stays open for the channel's lifetime: its EOF tells a channel that the peer closed or died.
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "transport/verbs/resources.h"

namespace detwan::transport::verbs {

// Binds and listens on "host:port" (numeric IPv4/IPv6 or a name; port 0 picks one).
// `bound` receives "host:actualport".
Result<common::UniqueFd> listen_tcp(const std::string& address, std::string& bound);
// kTimeout if no peer connects within timeout_ns.
Result<common::UniqueFd> accept_tcp(int listen_fd, int64_t timeout_ns);
// kUnavailable if refused, kTimeout if the connect does not complete within timeout_ns.
Result<common::UniqueFd> connect_tcp(const std::string& address, int64_t timeout_ns);
// Sends `local`, receives and validates the peer's (bad magic is an error naming it).
Result<QpInfo> exchange_qp_info(int fd, const QpInfo& local, int64_t timeout_ns);

}  // namespace detwan::transport::verbs
