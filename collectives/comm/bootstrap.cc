// join_bootstrap: parses the spec and hands over to the tcp or file rendezvous.
#include "collectives/comm/bootstrap.h"

#include <fmt/format.h>

#include "collectives/comm/bootstrap_file.h"
#include "collectives/comm/bootstrap_io.h"
#include "collectives/comm/bootstrap_tcp.h"

namespace detwan::collectives {

Result<std::unique_ptr<Bootstrap>> join_bootstrap(const std::string& spec_text, int rank,
                                                  int nranks, int64_t timeout_ns) {
  auto spec = bootstrap::parse_spec(spec_text);
  if (!spec) return std::unexpected(spec.error());
  if (nranks < 1 || nranks > bootstrap::kMaxRanks) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap {}: nranks must be 1..{}, got {}", spec->name(),
                                  bootstrap::kMaxRanks, nranks));
  }
  if (rank < 0 || rank >= nranks) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap {}: rank {} is out of range for nranks {}",
                                  spec->name(), rank, nranks));
  }
  if (timeout_ns <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap {}: timeout_ns must be > 0, got {}", spec->name(),
                                  timeout_ns));
  }
  if (spec->kind == bootstrap::Spec::Kind::kFile) return bootstrap::join_file(*spec, rank, nranks);
  return bootstrap::join_tcp(*spec, rank, nranks, timeout_ns);
}

}  // namespace detwan::collectives
