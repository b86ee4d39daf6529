// EAL initialisation, once per process.
#include "dataplane/dpdk/eal.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <unistd.h>

namespace detwan::dataplane::dpdk {
namespace {

// rte_eal_init may run once per process; this orders concurrent callers (two gateways of one
// test process) and remembers the outcome. Process-wide because the EAL is.
enum class EalState { kDown, kUp, kCleanedUp };
struct EalGuard {
  std::mutex mutex;
  EalState state = EalState::kDown;
};
EalGuard& eal_guard() {
  static EalGuard guard;
  return guard;
}

}  // namespace

common::Error rte_error(common::ErrorCode code, const std::string& what) {
  return common::Error{code, fmt::format("{}: {}", what, rte_strerror(rte_errno))};
}

common::Result<EalInit> init_eal(const std::vector<std::string>& eal_args) {
  EalInit result;
  result.words.emplace_back("detwan-gw");
  if (eal_args.empty()) {
    for (const char* word : kDefaultEalArgs) result.words.emplace_back(word);
  } else {
    result.words.insert(result.words.end(), eal_args.begin(), eal_args.end());
  }
  const bool has_prefix =
      std::any_of(result.words.begin(), result.words.end(), [](const std::string& word) {
        return word.starts_with("--file-prefix") || word == "--in-memory";
      });
  if (!has_prefix) result.words.push_back(fmt::format("--file-prefix=detwan-gw-{}", ::getpid()));

  EalGuard& guard = eal_guard();
  const std::lock_guard<std::mutex> lock(guard.mutex);
  if (guard.state == EalState::kUp) return result;
  if (guard.state == EalState::kCleanedUp) {
    return common::make_error(common::ErrorCode::kUnavailable,
                              "the DPDK EAL of this process was already cleaned up; DPDK cannot "
                              "start again in the same process");
  }
  std::vector<std::string> copy = result.words;  // rte_eal_init may rewrite argv
  std::vector<char*> argv;
  argv.reserve(copy.size() + 1);
  for (std::string& word : copy) argv.push_back(word.data());
  argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(copy.size()), argv.data()) < 0) {
    if (rte_errno == EALREADY) {  // initialised outside this module (e.g. by a test)
      guard.state = EalState::kUp;
      return result;
    }
    return std::unexpected(rte_error(
        common::ErrorCode::kConfig,
        fmt::format("rte_eal_init({})", fmt::join(result.words.begin() + 1, result.words.end(), " "))));
  }
  guard.state = EalState::kUp;
  result.initialised = true;
  return result;
}

void cleanup_eal() noexcept {
  EalGuard& guard = eal_guard();
  const std::lock_guard<std::mutex> lock(guard.mutex);
  if (guard.state != EalState::kUp) return;
  (void)rte_eal_cleanup();
  guard.state = EalState::kCleanedUp;
}

}  // namespace detwan::dataplane::dpdk
