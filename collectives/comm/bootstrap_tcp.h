#pragma once
// Private to the bootstrap: the TCP rendezvous (root thread and joining client).
#include <cstdint>
#include <memory>
#include <string>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_io.h"

namespace detwan::collectives::bootstrap {

// Serves one exchange on `listener` from a detached thread (bootstrap_root.cc). `name`
// prefixes every error message ("bootstrap tcp://10.0.0.1:5000"); joins must carry `nonce`
// ("" = fixed-address mode). The thread owns all its state and exits after answering or
// at timeout_ns.
void start_root_thread(Listener listener, std::string name, std::string nonce,
                       int64_t timeout_ns);

// Connects (with retry until timeout_ns) to the root named by a tcp spec; for a spec without
// a nonce, rank 0 first starts the root on HOST:PORT itself.
Result<std::unique_ptr<Bootstrap>> join_tcp(const Spec& spec, int rank, int nranks,
                                            int64_t timeout_ns);

}  // namespace detwan::collectives::bootstrap
