#pragma once
// Bootstrap: how the ranks of a new communicator find each other, before any channel exists.
//
// One exchange: every rank contributes a blob (its site and endpoint addresses) and receives
// every rank's blob in rank order. Two rendezvous kinds, named by the UniqueId's spec:
//
//   tcp://HOST:PORT#NONCE   a root (a thread in the process that created the id, or in rank 0
//                           for a fixed address) accepts one TCP connection per rank, checks
//                           nonce / nranks / duplicate ranks, and answers every rank with all
//                           blobs once the last has joined. Frames: u32 length + bytes.
//   tcp://HOST:PORT         (no nonce) fixed-address mode, as MASTER_ADDR:MASTER_PORT: rank 0
//                           starts the root on HOST:PORT itself (SO_REUSEADDR) before joining;
//                           the others retry connecting until it is up. The nonce (the secret)
//                           is $DETWAN_BOOTSTRAP_SECRET, the same on every rank; without it the
//                           join is refused (fixed_address_secret).
// The root checks a join's nonce in its first bytes, in constant time, before it buffers the
// rest of the frame, and keeps at most 1,024 connections that have not shown it.
//   file:///DIR#NONCE       each rank writes DIR/<nonce>.<rank> atomically (temporary file, then
//                           link; an existing file is a duplicate-rank error, never
//                           overwritten) and polls until all nranks files exist. Each rank then
//                           leaves a ".done" mark; whoever sees every mark removes all the
//                           files, so the directory ends empty. Without "#NONCE" the files are
//                           DIR/bootstrap.<rank>. local_host(): $DETWAN_LISTEN_HOST or 127.0.0.1.
//
// The root serves one exchange: nranks is fixed by the first valid join; a join with another
// nranks, a rank out of range, a rank already joined or a wrong nonce gets an error answer
// naming the problem (the good joins are kept); a rank whose connection drops before the end
// may join again. At its timeout the root answers every joined rank with kTimeout naming the
// ranks that never joined (and the first rejected join, if any). The root and its joins are
// in-process threads with no shared state: any number may run at once.
//
// Setup tier: blocks up to timeout_ns; errors say which ranks never joined, or what a
// malformed/mismatched join carried ("rank 3 joined with nranks 8, expected 4").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/types.h"

namespace detwan::collectives {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  // The local address this process used to reach the rendezvous ("10.0.1.2"; "127.0.0.1"
  // for file stores): a good default for where the rank's endpoints listen.
  [[nodiscard]] virtual std::string local_host() const = 0;
  // Contributes `mine`; returns every rank's blob, index = rank. Once per Bootstrap.
  virtual Result<std::vector<std::string>> exchange(const std::string& mine,
                                                    int64_t timeout_ns) = 0;
};

// Joins the rendezvous in `spec` ("tcp://HOST:PORT#NONCE" or "file:///DIR#NONCE") as `rank`
// of `nranks`. For a tcp spec without a nonce, rank 0 starts the root on HOST:PORT (which then
// lives for timeout_ns). tcp: connects now, retrying until timeout_ns (the root may start
// later), so local_host() is the address of that connection. kInvalidArgument for a bad spec
// or rank/nranks, kTimeout if the root cannot be reached.
Result<std::unique_ptr<Bootstrap>> join_bootstrap(const std::string& spec, int rank, int nranks,
                                                  int64_t timeout_ns);

// Starts a root thread listening on host:0 in this process; returns its spec
// "tcp://HOST:PORT#NONCE". The thread serves one exchange of any nranks (fixed by the first
// join) and exits when it is done or after timeout_ns.
Result<std::string> start_bootstrap_root(const std::string& host, int64_t timeout_ns);

}  // namespace detwan::collectives
