#pragma once
// DPDK ethdev backend of detwan-wanem: two ethdev ports (real NICs or vdevs such as
// net_af_packet, net_af_xdp, net_memif, net_null), one rx and one tx queue each, one mbuf pool.
// A handle is an rte_mbuf*; duplicates are rte_pktmbuf_copy()'d. There is no descriptor to
// sleep on, so the forwarding loop busy-polls one core.
//
// Interface names: an ethdev name ("net_null0", "net_af_packet_a"), a port id ("0"), or a
// kernel interface name, for which a `--vdev net_af_packet_<a|b>,iface=NAME` is added to the
// EAL arguments. Without --eal, the EAL runs with kDefaultEalArgs (no hugepages, no PCI), which
// works on this project's machines. Unless the arguments name a --file-prefix, one unique to the
// process is added, so that several instances can run side by side.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "common/status.h"
#include "tools/wanem/backend.h"
#include "tools/wanem/port.h"

namespace detwan::wanem::dpdk {

inline constexpr const char* kDefaultEalArgs = "--no-huge -m 1024 --no-pci";

struct DpdkPortConfig {
  std::string iface[kSideCount];
  std::string eal_args;         // shell-like words; empty: kDefaultEalArgs
  uint32_t pool_frames = 8191;  // mbufs (2^n - 1 is what rte_mempool likes best)
  uint16_t rx_descriptors = 512;
  uint16_t tx_descriptors = 512;
};

class DpdkPort {
 public:
  static constexpr uint32_t kMaxBurst = 64;

  // Setup (port.cc): rte_eal_init (once per process), pool, ports configured and started.
  static common::Result<std::unique_ptr<DpdkPort>> open(const DpdkPortConfig& config,
                                                        spdlog::logger& log);
  ~DpdkPort();  // stops and closes the ports, frees the pool, rte_eal_cleanup()
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  // Datapath (port_datapath.cc); contract in tools/wanem/port.h.
  [[nodiscard]] uint32_t rx_burst(Side side, uint64_t* handles, uint32_t count) noexcept;
  [[nodiscard]] uint32_t tx_burst(Side side, const uint64_t* handles, uint32_t count) noexcept;
  [[nodiscard]] common::Status clone(uint64_t handle, uint64_t* copy) noexcept;
  void free(uint64_t handle) noexcept { rte_pktmbuf_free(mbuf(handle)); }
  [[nodiscard]] const uint8_t* data(uint64_t handle) const noexcept {
    return rte_pktmbuf_mtod(mbuf(handle), const uint8_t*);
  }
  [[nodiscard]] uint32_t data_bytes(uint64_t handle) const noexcept {
    return mbuf(handle)->data_len;
  }
  [[nodiscard]] uint32_t frame_bytes(uint64_t handle) const noexcept {
    return mbuf(handle)->pkt_len;
  }
  [[nodiscard]] int64_t rx_time_ns(uint64_t) const noexcept { return 0; }
  [[nodiscard]] int rx_fd(Side) const noexcept { return -1; }
  [[nodiscard]] static constexpr bool rx_timestamps() noexcept { return false; }
  [[nodiscard]] PortCounters& counters() noexcept { return counters_; }
  void refresh_counters_st();  // imissed -> rx_kernel, rx_nombuf -> pool_empty (port.cc)

  [[nodiscard]] uint16_t port_id(Side side) const noexcept { return port_id_[index_of(side)]; }
  [[nodiscard]] uint32_t pool_frames() const noexcept { return pool_frames_; }

 private:
  DpdkPort() = default;
  [[nodiscard]] static rte_mbuf* mbuf(uint64_t handle) noexcept {
    return reinterpret_cast<rte_mbuf*>(static_cast<uintptr_t>(handle));
  }

  uint16_t port_id_[kSideCount] = {};
  bool started_[kSideCount] = {};
  rte_mempool* pool_ = nullptr;
  uint32_t pool_frames_ = 0;
  bool eal_ready_ = false;
  PortCounters counters_;
};

// Runs the forwarding loop on an open port until stop/duration (port_datapath.cc).
common::Result<RunOutcome> forward(DpdkPort& port, const BackendRun& run);

// Splits an EAL argument string into words ("a 'b c'" -> a, b c); exposed for tests.
std::vector<std::string> split_words(const std::string& text);

}  // namespace detwan::wanem::dpdk
