#pragma once
// The DPDK Environment Abstraction Layer of this process. DPDK allows one rte_eal_init per
// process, so this is the one piece of process-wide state of the backend: init_eal() is
// thread-safe and idempotent (a second call keeps the first call's arguments and says so), and
// only the caller that really initialised the EAL (EalInit::initialised) may call cleanup_eal()
// at the end of the process' DPDK use — after it nothing DPDK can run again in this process.
//
// Arguments: `eal_args` as in the gateway config's dpdk.eal (DpdkConfig::eal_args), after argv[0] "detwan-gw".
// An empty list means kDefaultEalArgs (no hugepages, no PCI: what runs on any machine; name
// vdevs with --vdev). Unless the arguments give --file-prefix or --in-memory, a prefix unique
// to the process is added so that several gateways run side by side.
#include <string>
#include <vector>

#include "common/status.h"

namespace detwan::dataplane::dpdk {

inline constexpr const char* kDefaultEalArgs[] = {"--no-huge", "-m", "512", "--no-pci"};

struct EalInit {
  bool initialised = false;        // true: this call ran rte_eal_init
  std::vector<std::string> words;  // the effective argv (argv[0] included)
};

// Errors (kConfig) carry rte_strerror and the arguments used.
common::Result<EalInit> init_eal(const std::vector<std::string>& eal_args);

// rte_eal_cleanup(); call once, after every port and pool is released.
void cleanup_eal() noexcept;

// "<what>: <rte_strerror(rte_errno)>" as an Error with `code`.
common::Error rte_error(common::ErrorCode code, const std::string& what);

}  // namespace detwan::dataplane::dpdk
