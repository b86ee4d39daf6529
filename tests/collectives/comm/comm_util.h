#pragma once
// Helpers for the communicator tests: N ranks as threads of this process, each with its own
// communicator created through the C API (or the C++ API), meeting at a bootstrap root on
// 127.0.0.1 (port 0). Backends are skipped when this machine cannot run them.
#include <cctype>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/comm/communicator.h"
#include "detwan/collectives.h"
#include "transport/registry.h"

namespace detwan::collectives::testing {

struct Backends {
  std::string intra;
  std::string inter;
};

// "tcp_udp", "tcp_udp_threads_2" (gtest names: letters, digits and '_').
inline std::string backends_name(const ::testing::TestParamInfo<Backends>& info) {
  std::string name = info.param.intra + "_" + info.param.inter;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

// The reason a backend cannot run here, or "" if it can.
inline std::string unusable(const Backends& backends) {
  for (const auto& spec : {backends.intra, backends.inter}) {
    const std::string name = spec.substr(0, spec.find(':'));  // "udp:threads=2" -> "udp"
    auto info = transport::backend_info(name);
    if (!info.usable) return name + ": " + info.reason;
  }
  return "";
}

// n ranks: one site "a" for n <= 1, else the first half in "a", the rest in "b".
inline std::vector<std::string> two_sites(int n) {
  std::vector<std::string> sites(n, "a");
  for (int r = (n + 1) / 2; r < n && n > 1; ++r) sites[r] = "b";
  return sites;
}

inline detwanUniqueId make_id() {
  detwanUniqueId id{};
  auto unique = UniqueId::create_root("127.0.0.1", 60'000'000'000);
  EXPECT_TRUE(unique.has_value()) << (unique ? "" : unique.error().message);
  if (unique) {
    const auto bytes = unique->to_bytes();
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  return id;
}

struct RankSetup {
  std::vector<std::string> sites;
  Backends backends{"tcp", "loopback"};
  int64_t timeout_ms = 30'000;
  std::optional<detwanAlgorithm_t> algorithm = std::nullopt;  // default: the config's (auto)
};

// Creates a communicator per rank (each on its own thread), runs fn(rank, comm) there, then
// destroys it (unless fn set comm to nullptr, e.g. after detwanCommAbort).
inline void with_comms(const RankSetup& setup, const std::function<void(int, detwanComm_t&)>& fn) {
  const int n = static_cast<int>(setup.sites.size());
  const detwanUniqueId id = make_id();
  // Nobody destroys before every rank is done: a close racing the peer's last acknowledgement
  // can fail that peer's last operation (transport: close does not flush pending acks).
  std::latch all_done(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      detwanConfig_t config = DETWAN_CONFIG_INITIALIZER;
      config.site = setup.sites[r].c_str();
      config.intra_backend = setup.backends.intra.c_str();
      config.inter_backend = setup.backends.inter.c_str();
      config.listen_host = "127.0.0.1";
      config.timeout_ms = setup.timeout_ms;
      if (setup.algorithm) config.algorithm = *setup.algorithm;
      detwanComm_t comm = nullptr;
      const detwanResult_t init = detwanCommInitRankConfig(&comm, n, id, r, &config);
      EXPECT_EQ(init, detwanSuccess) << "rank " << r << ": " << detwanGetLastError(nullptr);
      if (init == detwanSuccess) fn(r, comm);
      all_done.arrive_and_wait();
      if (init != detwanSuccess) return;
      if (comm != nullptr) {
        EXPECT_EQ(detwanCommDestroy(comm), detwanSuccess);
      }
    });
  }
  for (auto& t : threads) t.join();
}

// The communicators of one job. Destroying one finalizes it, which is collective (every rank
// must get there), so they are destroyed together, each on its own thread.
struct Comms {
  std::vector<std::unique_ptr<Communicator>> list;
  explicit Comms(size_t n) : list(n) {}
  Comms(Comms&&) = default;
  ~Comms() {
    std::vector<std::thread> threads;
    for (auto& comm : list) {
      if (comm) threads.emplace_back([&comm] { comm.reset(); });
    }
    for (auto& t : threads) t.join();
  }
  [[nodiscard]] size_t size() const { return list.size(); }
  std::unique_ptr<Communicator>& operator[](size_t i) { return list[i]; }
  auto begin() { return list.begin(); }
  auto end() { return list.end(); }
};

inline Comms make_comms(const std::vector<std::string>& sites, const CommConfig& base) {
  const int n = static_cast<int>(sites.size());
  auto id = UniqueId::create_root("127.0.0.1", 60'000'000'000);
  EXPECT_TRUE(id) << id.error().message;
  Comms comms(n);
  if (!id) return comms;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommConfig config = base;
      config.site = sites[r];
      auto comm = Communicator::create(*id, r, n, config);
      EXPECT_TRUE(comm) << "rank " << r << ": " << comm.error().message;
      if (comm) comms[r] = std::move(*comm);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

inline CommConfig test_config() {
  CommConfig config;
  config.intra_backend = "tcp";
  config.inter_backend = "loopback";
  config.listen_host = "127.0.0.1";
  config.wan_rate_bps = 200'000'000;
  config.timeout_ns = 30'000'000'000;
  return config;
}

}  // namespace detwan::collectives::testing
