// Setup of the DPDK backend: EAL, mbuf pool, ports.
#include "tools/wanem/dpdk/port.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <net/if.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mempool.h>
#include <unistd.h>

namespace detwan::wanem::dpdk {
namespace {

constexpr std::string_view kSideOption[kSideCount] = {"iface_a", "iface_b"};
constexpr std::string_view kAutoVdev[kSideCount] = {"net_af_packet_a", "net_af_packet_b"};

common::Error rte_error(common::ErrorCode code, std::string_view what) {
  return common::Error{code, fmt::format("{}: {}", what, rte_strerror(rte_errno))};
}

bool is_number(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

// What the user named: an ethdev (used as is), or a kernel interface (wrapped in a vdev).
common::Result<std::string> ethdev_name_for(const std::string& name, int side,
                                            std::vector<std::string>& eal_words) {
  if (name.starts_with("net_") || is_number(name)) return name;
  if (::if_nametoindex(name.c_str()) == 0) {
    return common::make_error(common::ErrorCode::kNotFound,
                              fmt::format("{}: '{}' is neither a DPDK port (net_*, a port id) nor "
                                          "an interface in this network namespace",
                                          kSideOption[side], name));
  }
  eal_words.push_back(fmt::format("--vdev={},iface={}", kAutoVdev[side], name));
  return std::string(kAutoVdev[side]);
}

common::Result<uint16_t> find_port(const std::string& name, int side) {
  uint16_t id = 0;
  if (is_number(name) && name.size() < 6) {
    id = static_cast<uint16_t>(std::stoi(name));
    if (rte_eth_dev_is_valid_port(id) != 0) return id;
  } else if (rte_eth_dev_get_port_by_name(name.c_str(), &id) == 0) {
    return id;
  }
  std::string known;
  uint16_t port = 0;
  RTE_ETH_FOREACH_DEV(port) {
    char port_name[RTE_ETH_NAME_MAX_LEN] = {};
    if (rte_eth_dev_get_name_by_port(port, port_name) == 0) {
      known += fmt::format("{}{} ({})", known.empty() ? "" : ", ", port_name, port);
    }
  }
  return common::make_error(common::ErrorCode::kNotFound,
                            fmt::format("{}: no DPDK port '{}' (ports: {})", kSideOption[side],
                                        name, known.empty() ? "none: add --vdev to --eal" : known));
}

}  // namespace

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (const char c : text) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

common::Result<std::unique_ptr<DpdkPort>> DpdkPort::open(const DpdkPortConfig& config,
                                                         spdlog::logger& log) {
  std::unique_ptr<DpdkPort> port(new DpdkPort());
  std::vector<std::string> words{"detwan-wanem"};
  for (std::string& word :
       split_words(config.eal_args.empty() ? kDefaultEalArgs : config.eal_args)) {
    words.push_back(std::move(word));
  }
  const bool has_prefix = std::any_of(words.begin(), words.end(), [](const std::string& word) {
    return word.starts_with("--file-prefix") || word == "--in-memory";
  });
  if (!has_prefix) words.push_back(fmt::format("--file-prefix=detwan-wanem-{}", ::getpid()));
  std::string names[kSideCount];
  for (int i = 0; i < kSideCount; ++i) {
    auto name = ethdev_name_for(config.iface[i], i, words);
    if (!name) return std::unexpected(name.error());
    names[i] = std::move(*name);
  }
  log.info("EAL arguments: {}", fmt::join(words.begin() + 1, words.end(), " "));
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(words.size()), argv.data()) < 0) {
    return std::unexpected(rte_error(common::ErrorCode::kConfig, "rte_eal_init"));
  }
  port->eal_ready_ = true;
  for (int i = 0; i < kSideCount; ++i) {
    auto id = find_port(names[i], i);
    if (!id) return std::unexpected(id.error());
    port->port_id_[i] = *id;
  }
  if (port->port_id_[0] == port->port_id_[1]) {
    return common::make_error(common::ErrorCode::kConfig,
                              "iface_a and iface_b name the same DPDK port");
  }
  port->pool_ =
      rte_pktmbuf_pool_create("wanem_pool", config.pool_frames, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                              static_cast<int>(rte_socket_id()));
  if (port->pool_ == nullptr) {
    return std::unexpected(
        rte_error(common::ErrorCode::kIo,
                  fmt::format("mbuf pool of {} (try fewer --pool-frames)", config.pool_frames)));
  }
  port->pool_frames_ = config.pool_frames;
  for (int i = 0; i < kSideCount; ++i) {
    const uint16_t id = port->port_id_[i];
    rte_eth_conf conf{};
    if (rte_eth_dev_configure(id, 1, 1, &conf) != 0) {
      return std::unexpected(rte_error(common::ErrorCode::kIo, "configure " + names[i]));
    }
    uint16_t rx_descriptors = config.rx_descriptors;
    uint16_t tx_descriptors = config.tx_descriptors;
    (void)rte_eth_dev_adjust_nb_rx_tx_desc(id, &rx_descriptors, &tx_descriptors);
    const int socket = rte_eth_dev_socket_id(id);
    const auto socket_id = static_cast<unsigned>(socket < 0 ? 0 : socket);
    if (rte_eth_rx_queue_setup(id, 0, rx_descriptors, socket_id, nullptr, port->pool_) != 0) {
      return std::unexpected(rte_error(common::ErrorCode::kIo, "rx queue of " + names[i]));
    }
    if (rte_eth_tx_queue_setup(id, 0, tx_descriptors, socket_id, nullptr) != 0) {
      return std::unexpected(rte_error(common::ErrorCode::kIo, "tx queue of " + names[i]));
    }
    if (rte_eth_dev_start(id) != 0) {
      return std::unexpected(rte_error(common::ErrorCode::kIo, "start " + names[i]));
    }
    port->started_[i] = true;
    (void)rte_eth_promiscuous_enable(id);  // vdevs without the notion say ENOTSUP
    log.info("{}: DPDK port {} '{}', {} rx / {} tx descriptors", kSideOption[i], id, names[i],
             rx_descriptors, tx_descriptors);
  }
  return port;
}

DpdkPort::~DpdkPort() {
  for (int i = 0; i < kSideCount; ++i) {
    if (started_[i]) {
      (void)rte_eth_dev_stop(port_id_[i]);
      (void)rte_eth_dev_close(port_id_[i]);
    }
  }
  if (pool_ != nullptr) rte_mempool_free(pool_);
  if (eal_ready_) (void)rte_eal_cleanup();
}

void DpdkPort::refresh_counters_st() {
  uint64_t missed = 0;
  uint64_t no_mbuf = 0;
  for (int i = 0; i < kSideCount; ++i) {
    rte_eth_stats stats{};
    if (rte_eth_stats_get(port_id_[i], &stats) == 0) {
      missed += stats.imissed;
      no_mbuf += stats.rx_nombuf;
    }
  }
  // The device counts these itself (absolute values), nothing else adds to them here.
  counters_.drops[static_cast<int>(PortDrop::kRxKernel)] = missed;
  counters_.drops[static_cast<int>(PortDrop::kPoolEmpty)] = no_mbuf;
}

bool available() { return true; }

common::Result<RunOutcome> run(const BackendRun& run) {
  DpdkPortConfig config;
  config.iface[0] = run.options.iface_a;
  config.iface[1] = run.options.iface_b;
  config.eal_args = run.options.eal;
  if (run.options.pool_frames != 0) config.pool_frames = run.options.pool_frames;
  auto port = DpdkPort::open(config, *run.log);
  if (!port) return std::unexpected(port.error());
  if (!run.options.busy_poll) run.log->info("dpdk backend busy-polls (no descriptor to sleep on)");
  return forward(**port, run);
}

}  // namespace detwan::wanem::dpdk
