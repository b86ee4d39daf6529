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
//   file:///DIR#NONCE       each rank writes DIR/<nonce>.<rank> atomically (write + rename) and
//                           polls until all nranks files exist.
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
// of `nranks`. For a tcp spec without a running root, rank 0 starts the root on HOST:PORT.
Result<std::unique_ptr<Bootstrap>> join_bootstrap(const std::string& spec, int rank, int nranks,
                                                  int64_t timeout_ns);

// Starts a root thread listening on host:0 in this process; returns its spec
// "tcp://HOST:PORT#NONCE". The thread serves one exchange of any nranks (fixed by the first
// join) and exits when it is done or after timeout_ns.
Result<std::string> start_bootstrap_root(const std::string& host, int64_t timeout_ns);

}  // namespace detwan::collectives
