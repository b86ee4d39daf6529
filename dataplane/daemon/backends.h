#pragma once
// The packet-I/O backends detwan-gw can dispatch to, chosen by config.backend. Meson picks the
// file that defines run_backend(): backends.cc links uring/ and dpdk/ (dpdk/ itself may be its
// absent.cc, which explains how to get DPDK); backends_uring_only.cc is used while the tree has
// no dataplane/dpdk library.
#include "common/status.h"
#include "dataplane/gw/run_context.h"

namespace detwan::dataplane::daemon {

// Runs the backend named by context.config.backend until context.stop (gw/run_context.h).
common::Result<void> run_backend(gw::RunContext& context);

}  // namespace detwan::dataplane::daemon
