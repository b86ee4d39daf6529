#pragma once
// Bootstrap: how the ranks of a new communicator find each other, before any channel exists.
//
// One exchange: every rank contributes a blob (its site and endpoint addresses) and receives
// every rank's blob in rank order. Every rendezvous has a secret (128 to 256 bits), which never
// crosses the wire (docs/collectives.md, "The bootstrap protocol"):
//
//   tcp://HOST:PORT#SECRET  a root (a thread in the process that created the id, or in rank 0
//                           for a fixed address) accepts one TCP connection per rank. Each
//                           connection starts with a challenge and response: the joiner sends
//                           a fresh nonce, the root answers its own nonce and an HMAC proving
//                           it knows the secret, and only then does the joiner prove it back.
//                           A joiner tells a root that cannot prove nothing (error: "the
//                           process at this address does not know the job's secret"). The join
//                           and the answer travel sealed (AES-256-GCM) under keys derived from
//                           the secret and both nonces. The root checks nranks / duplicate
//                           ranks, and answers every rank with all blobs once the last joined.
//   tcp://HOST:PORT         fixed-address mode, as MASTER_ADDR:MASTER_PORT: rank 0 starts the
//                           root on HOST:PORT itself (SO_REUSEADDR) before joining; the others
//                           retry connecting until it is up. The secret is
//                           $DETWAN_BOOTSTRAP_SECRET, the same on every rank; without it the
//                           join is refused (environment_secret).
//   file:///DIR#SECRET      each rank writes one record (mode 0600, ending in an HMAC keyed by
//                           the secret) atomically (temporary file, then link; an existing file
//                           is an error, never overwritten) and polls until all nranks exist; a
//                           record that does not verify is refused. File names derive from the
//                           secret without revealing it. Each rank then leaves a ".done" mark;
//                           whoever sees every mark removes all the files. Without "#SECRET"
//                           the secret is $DETWAN_BOOTSTRAP_SECRET; without either: refused.
//                           local_host(): $DETWAN_LISTEN_HOST or 127.0.0.1.
//
// The root serves one exchange: nranks is fixed by the first valid join; a join with another
// nranks, a rank out of range, a rank already joined gets an error answer naming the problem
// (the good joins are kept); a rank whose connection drops before the end may join again. A
// connection that has not proven the secret within a few seconds is closed, and at most a
// bounded number of them are held (a new one closes the oldest): strangers cannot exhaust the
// root. At its timeout the root answers every joined rank with kTimeout naming the ranks that
// never joined. The root and its joins are in-process threads with no shared state.
//
// Setup tier: blocks up to timeout_ns; errors say which ranks never joined, or what a
// malformed/mismatched join carried ("rank 3 joined with nranks 8, expected 4").
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/types.h"

namespace detwan::collectives {

// The communicator's key material (transport::SecurityKey has the same shape).
using CommKey = std::array<std::byte, 32>;

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  // The local address this process used to reach the rendezvous ("10.0.1.2"; "127.0.0.1"
  // for file stores): a good default for where the rank's endpoints listen.
  [[nodiscard]] virtual std::string local_host() const = 0;
  // Contributes `mine`; returns every rank's blob, index = rank. Once per Bootstrap.
  virtual Result<std::vector<std::string>> exchange(const std::string& mine,
                                                    int64_t timeout_ns) = 0;
  // The 32-byte key of the communicator this rendezvous creates, known from the join on
  // (before exchange()): every rank that joined gets the same, a stranger cannot compute it.
  // tcp: HKDF of the secret, salted with a random value the root drew for this rendezvous
  // (so two jobs that reuse one DETWAN_BOOTSTRAP_SECRET still get different keys); file: of
  // the secret alone (a fresh secret per job gives a fresh key).
  [[nodiscard]] virtual CommKey communicator_key() const = 0;
};

// Joins the rendezvous in `spec` ("tcp://HOST:PORT#SECRET" or "file:///DIR#SECRET") as `rank`
// of `nranks`. For a tcp spec without a secret, rank 0 starts the root on HOST:PORT (which then
// lives for timeout_ns). tcp: connects and runs the handshake now, retrying until timeout_ns
// (the root may start later), so local_host() is the address of that connection.
// kInvalidArgument for a bad spec or rank/nranks (nranks <= 65536), a file spec without a
// secret, or a root that cannot prove the secret; kTimeout if the root cannot be reached.
Result<std::unique_ptr<Bootstrap>> join_bootstrap(const std::string& spec, int rank, int nranks,
                                                  int64_t timeout_ns);

// Starts a root thread listening on host:0 in this process; returns its spec
// "tcp://HOST:PORT#SECRET" with a fresh random secret. The thread serves one exchange of any
// nranks (fixed by the first join) and exits when it is done or after timeout_ns.
Result<std::string> start_bootstrap_root(const std::string& host, int64_t timeout_ns);
// The same with a given secret (32-64 hex digits; kInvalidArgument otherwise).
Result<std::string> start_bootstrap_root(const std::string& host, int64_t timeout_ns,
                                         const std::string& secret);

}  // namespace detwan::collectives
