#pragma once
// Private to the bootstrap: the TCP rendezvous (root thread and joining client).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_io.h"

namespace detwan::collectives::bootstrap {

// What the root gives a connection that has not proven the secret yet (docs/collectives.md,
// "Bounds"). Such a connection costs a descriptor and a fixed buffer of under 100 bytes.
struct RootLimits {
  // Closed if it has not proven the secret within this (one round trip for a genuine rank).
  int64_t handshake_timeout_ns = 5'000'000'000;
  // At most this many at once; a new one beyond closes the oldest. A genuine rank needs one
  // round trip to prove itself, so a flood must open this many connections within that round
  // trip to push it out, and a rank whose connection is closed before the challenge reconnects.
  int max_unauthenticated = 256;
};

// The root's counters (read by tests; the root prints them in one line to stderr when it
// exits, if it closed any connection that did not prove the secret).
struct RootStats {
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> authenticated{0};
  std::atomic<uint64_t> malformed{0};           // a hello or proof that is not one
  std::atomic<uint64_t> wrong_proof{0};         // a joiner that does not know the secret
  std::atomic<uint64_t> handshake_timeouts{0};  // silent past handshake_timeout_ns
  std::atomic<uint64_t> evicted{0};             // closed to make room (max_unauthenticated)
  std::atomic<bool> done{false};                // the root thread has exited
};

// Serves one exchange on `listener` from a thread of its own (bootstrap_root.cc; one still
// running when the process exits is stopped and joined). `name` is the rendezvous as every
// rank names it ("tcp://10.0.0.1:5000"): it prefixes every error message and is bound into
// every proof. The thread owns all its state and exits after answering or at timeout_ns.
// kInternal if OpenSSL cannot derive the keys or draw the salt.
Result<std::shared_ptr<const RootStats>> start_root_thread(Listener listener, std::string name,
                                                           const std::string& secret,
                                                           int64_t timeout_ns,
                                                           RootLimits limits = {});

// Connects (with retry until timeout_ns) to the root named by a tcp spec and runs the
// handshake; for a spec without a secret, rank 0 first starts the root on HOST:PORT itself.
Result<std::unique_ptr<Bootstrap>> join_tcp(const Spec& spec, int rank, int nranks,
                                            int64_t timeout_ns);

}  // namespace detwan::collectives::bootstrap
