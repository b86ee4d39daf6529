// The C API (collectives/include/detwan/collectives.h) over the C++ Communicator: versions,
// errors, configuration, communicator lifecycle and queries. Operations, groups and requests
// are in capi_ops.cc.
//
// ErrorCode -> detwanResult_t, written down once:
//   before an operation runs (setup, argument checks, configuration):
//     kInvalidArgument, kConfig, kNotFound (unknown backend)  -> detwanInvalidArgument
//     kIo, kUnavailable, kAlreadyExists (bind, connect, ...)  -> detwanSystemError
//     kTimeout (bootstrap, mesh setup)                        -> detwanTimeout
//     kInternal                                               -> detwanInternalError
//   an operation that ran, or a communicator in error:
//     after detwanCommAbort                                   -> detwanAborted
//     kTimeout (op timeout, or a peer silent for peer_timeout) -> detwanTimeout
//     kInvalidArgument (a peer's message did not match: the ranks disagree about the
//     operation)                                              -> detwanInvalidUsage
//     kInternal                                               -> detwanInternalError
//     anything else (peer closed, channel failed)             -> detwanRemoteError
#include <cstring>
#include <new>
#include <type_traits>
#include <string>

#include <fmt/format.h>

#include "collectives/comm/capi_internal.h"

using detwan::collectives::Algorithm;
using detwan::collectives::AsyncError;
using detwan::collectives::CommConfig;
using detwan::collectives::Communicator;
using detwan::collectives::Error;
using detwan::collectives::ErrorCode;
using detwan::collectives::kUniqueIdBytes;
using detwan::collectives::UniqueId;
namespace capi = detwan::collectives::capi;

static_assert(kUniqueIdBytes == DETWAN_UNIQUE_ID_BYTES);

namespace detwan::collectives::capi {
namespace {
thread_local std::string last_error;  // per thread, as the header says
}  // namespace

detwanResult_t fail(detwanResult_t result, const std::string& message) {
  last_error = message;
  return result;
}

detwanResult_t ok() { return detwanSuccess; }

const char* last_error_message() { return last_error.c_str(); }

detwanResult_t fail_setup(const Error& error) {
  detwanResult_t result = detwanInternalError;
  switch (error.code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kConfig:
    case ErrorCode::kNotFound:
      result = detwanInvalidArgument;
      break;
    case ErrorCode::kIo:
    case ErrorCode::kUnavailable:
    case ErrorCode::kAlreadyExists:
      result = detwanSystemError;
      break;
    case ErrorCode::kTimeout:
      result = detwanTimeout;
      break;
    case ErrorCode::kInternal:
      break;
  }
  return fail(result, error.message);
}

static detwanResult_t op_result(ErrorCode code, bool aborted) {
  if (aborted) return detwanAborted;
  switch (code) {
    case ErrorCode::kTimeout:
      return detwanTimeout;
    case ErrorCode::kInvalidArgument:
      return detwanInvalidUsage;
    case ErrorCode::kInternal:
      return detwanInternalError;
    default:
      return detwanRemoteError;
  }
}

detwanResult_t fail_op(const Error& error, bool aborted) {
  return fail(op_result(error.code, aborted), error.message);
}

detwanResult_t to_result(const AsyncError& error) { return op_result(error.code, error.aborted); }

}  // namespace detwan::collectives::capi

namespace {

detwanResult_t null_argument(const char* function, const char* argument) {
  return capi::fail(detwanInvalidArgument, fmt::format("{}: {} is NULL", function, argument));
}

// CommConfig from the environment, then the non-default fields of `config`.
detwanResult_t to_comm_config(const detwanConfig_t* config, CommConfig& out) {
  auto from_env = CommConfig::from_environment();
  if (!from_env) return capi::fail_setup(from_env.error());
  out = *from_env;
  if (config == nullptr) return capi::ok();
  if (config->size != sizeof(detwanConfig_t)) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("config.size is {}, expected sizeof(detwanConfig_t) = {} "
                                  "(initialise with DETWAN_CONFIG_INITIALIZER or "
                                  "detwanConfigInit; rebuild against this header)",
                                  config->size, sizeof(detwanConfig_t)));
  }
  if (config->timeout_ms < 0) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("config.timeout_ms is {}: must be >= 0", config->timeout_ms));
  }
  if (config->wan_rate_bps < 0) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("config.wan_rate_bps is {}: must be >= 0",
                                  config->wan_rate_bps));
  }
  if (config->chunk_bytes < 0) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("config.chunk_bytes is {}: must be >= 0", config->chunk_bytes));
  }
  const int algorithm = capi::enum_value(config->algorithm);
  if (algorithm < detwanAlgoAuto || algorithm > detwanAlgoHierarchical) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("config.algorithm is {}: must be 0..4", algorithm));
  }
  if (config->deterministic < -1 || config->deterministic > 1) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("config.deterministic is {}: must be -1 (default), 0 or 1",
                                  config->deterministic));
  }
  if (config->site != nullptr) {
    if (*config->site == '\0') return capi::fail(detwanInvalidArgument, "config.site is empty");
    out.site = config->site;
  }
  if (config->timeout_ms > 0) out.timeout_ns = config->timeout_ms * 1'000'000;
  if (config->wan_rate_bps > 0) out.wan_rate_bps = config->wan_rate_bps;
  if (algorithm != detwanAlgoAuto) out.algorithm = static_cast<Algorithm>(algorithm);
  if (config->chunk_bytes > 0) out.chunk_bytes = config->chunk_bytes;
  if (config->deterministic >= 0) out.deterministic = config->deterministic == 1;
  if (config->intra_backend != nullptr) out.intra_backend = config->intra_backend;
  if (config->inter_backend != nullptr) out.inter_backend = config->inter_backend;
  if (config->listen_host != nullptr) out.listen_host = config->listen_host;
  if (config->reservation != nullptr) out.reservation = config->reservation;
  if (config->agent != nullptr) out.agent_url = config->agent;
  return capi::ok();
}

}  // namespace

extern "C" {

detwanResult_t detwanGetVersion(int* version) {
  if (version == nullptr) return null_argument("detwanGetVersion", "version");
  *version = DETWAN_VERSION_CODE;
  return capi::ok();
}

const char* detwanGetErrorString(detwanResult_t result) {
  // A C caller may pass any int: read the bytes, never load it as the enum (in C++ a value
  // outside the enumeration's range is undefined; clang's UBSan reports it).
  std::underlying_type_t<detwanResult_t> raw;
  static_assert(sizeof raw == sizeof result);
  std::memcpy(&raw, &result, sizeof raw);
  switch (raw) {
    case detwanSuccess: return "success";
    case detwanInvalidArgument: return "invalid argument";
    case detwanInvalidUsage: return "invalid usage";
    case detwanSystemError: return "system error";
    case detwanRemoteError: return "remote error (a peer failed)";
    case detwanTimeout: return "timeout";
    case detwanInProgress: return "in progress";
    case detwanAborted: return "aborted";
    case detwanInternalError: return "internal error";
    default: return "unknown detwanResult_t";
  }
}

const char* detwanGetLastError(detwanComm_t /*comm*/) {
  return capi::last_error_message();
}

void detwanConfigInit(detwanConfig_t* config) {
  if (config == nullptr) return;
  *config = detwanConfig_t DETWAN_CONFIG_INITIALIZER;
}

detwanResult_t detwanGetUniqueId(detwanUniqueId* id) {
  if (id == nullptr) return null_argument("detwanGetUniqueId", "id");
  auto unique = UniqueId::create_root();
  if (!unique) return capi::fail_setup(unique.error());
  const auto bytes = unique->to_bytes();
  std::memcpy(id->internal, bytes.data(), bytes.size());
  return capi::ok();
}

detwanResult_t detwanUniqueIdFromString(const char* spec, detwanUniqueId* id) {
  if (spec == nullptr) return null_argument("detwanUniqueIdFromString", "spec");
  if (id == nullptr) return null_argument("detwanUniqueIdFromString", "id");
  auto unique = UniqueId::from_string(spec);
  if (!unique) return capi::fail_setup(unique.error());
  const auto bytes = unique->to_bytes();
  std::memcpy(id->internal, bytes.data(), bytes.size());
  return capi::ok();
}

detwanResult_t detwanCommInitRankConfig(detwanComm_t* comm, int nranks, detwanUniqueId id,
                                        int rank, const detwanConfig_t* config) {
  if (comm == nullptr) return null_argument("detwanCommInitRank", "comm");
  *comm = nullptr;
  if (nranks < 1) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("detwanCommInitRank: nranks is {}: must be >= 1", nranks));
  }
  if (rank < 0 || rank >= nranks) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("detwanCommInitRank: rank {} out of range 0..{}", rank,
                                  nranks - 1));
  }
  CommConfig comm_config;
  if (auto result = to_comm_config(config, comm_config); result != detwanSuccess) return result;
  std::array<char, kUniqueIdBytes> bytes{};
  std::memcpy(bytes.data(), id.internal, bytes.size());
  auto unique = UniqueId::from_bytes(bytes);
  if (!unique) return capi::fail_setup(unique.error());
  auto created = Communicator::create(*unique, rank, nranks, comm_config);
  if (!created) return capi::fail_setup(created.error());
  auto* handle = new (std::nothrow) detwanComm;
  if (handle == nullptr) return capi::fail(detwanSystemError, "out of memory");
  handle->comm = std::move(*created);
  *comm = handle;
  return capi::ok();
}

detwanResult_t detwanCommInitRank(detwanComm_t* comm, int nranks, detwanUniqueId id, int rank) {
  return detwanCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

detwanResult_t detwanCommDestroy(detwanComm_t comm) {
  if (comm == nullptr) return null_argument("detwanCommDestroy", "comm");
  // Collective: waits for pending operations and for every rank to reach destroy, so this
  // rank's close cannot cut off a peer's last operation (Communicator::finalize).
  // A peer that failed or left makes the barrier fail: that is not this rank's error (the
  // communicator is freed either way), as ncclCommDestroy.
  (void)comm->comm->finalize();
  delete comm;
  return capi::ok();
}

detwanResult_t detwanCommAbort(detwanComm_t comm) {
  if (comm == nullptr) return null_argument("detwanCommAbort", "comm");
  comm->aborted->store(true);
  comm->comm->abort();
  delete comm;
  return capi::ok();
}

detwanResult_t detwanCommSplit(detwanComm_t comm, int color, int key, detwanComm_t* newcomm,
                               const detwanConfig_t* config) {
  if (comm == nullptr) return null_argument("detwanCommSplit", "comm");
  if (newcomm == nullptr) return null_argument("detwanCommSplit", "newcomm");
  *newcomm = nullptr;
  std::optional<CommConfig> child_config;
  if (config != nullptr) {
    CommConfig parsed;
    if (auto result = to_comm_config(config, parsed); result != detwanSuccess) return result;
    child_config = parsed;
  }
  auto child = comm->comm->split(color < 0 ? -1 : color, key, child_config);
  if (!child) {
    if (comm->comm->async_error()) return capi::fail_op(child.error(), comm->aborted->load());
    return capi::fail_setup(child.error());
  }
  if (!*child) return capi::ok();  // DETWAN_SPLIT_NOCOLOR
  auto* handle = new (std::nothrow) detwanComm;
  if (handle == nullptr) return capi::fail(detwanSystemError, "out of memory");
  handle->comm = std::move(*child);
  *newcomm = handle;
  return capi::ok();
}

detwanResult_t detwanCommCount(const detwanComm_t comm, int* count) {
  if (comm == nullptr) return null_argument("detwanCommCount", "comm");
  if (count == nullptr) return null_argument("detwanCommCount", "count");
  *count = comm->comm->size();
  return capi::ok();
}

detwanResult_t detwanCommUserRank(const detwanComm_t comm, int* rank) {
  if (comm == nullptr) return null_argument("detwanCommUserRank", "comm");
  if (rank == nullptr) return null_argument("detwanCommUserRank", "rank");
  *rank = comm->comm->rank();
  return capi::ok();
}

detwanResult_t detwanCommSite(const detwanComm_t comm, int* site, int* nsites) {
  if (comm == nullptr) return null_argument("detwanCommSite", "comm");
  if (site == nullptr) return null_argument("detwanCommSite", "site");
  if (nsites == nullptr) return null_argument("detwanCommSite", "nsites");
  const auto& topology = comm->comm->topology();
  *site = topology.site_of(comm->comm->rank());
  *nsites = topology.num_sites();
  return capi::ok();
}

detwanResult_t detwanCommGetAsyncError(detwanComm_t comm, detwanResult_t* async_error) {
  if (comm == nullptr) return null_argument("detwanCommGetAsyncError", "comm");
  if (async_error == nullptr) return null_argument("detwanCommGetAsyncError", "async_error");
  auto error = comm->comm->async_error();
  *async_error = error ? capi::to_result(*error) : detwanSuccess;
  return capi::ok();
}

detwanResult_t detwanCommGetAsyncErrorInfo(detwanComm_t comm, detwanAsyncError_t* info) {
  if (comm == nullptr) return null_argument("detwanCommGetAsyncErrorInfo", "comm");
  if (info == nullptr) return null_argument("detwanCommGetAsyncErrorInfo", "info");
  auto error = comm->comm->async_error();
  info->result = error ? capi::to_result(*error) : detwanSuccess;
  info->failed_rank = error ? error->failed_rank : -1;
  const std::string message = error ? error->message : "";
  const size_t n = std::min(message.size(), sizeof(info->message) - 1);
  std::memcpy(info->message, message.data(), n);
  info->message[n] = '\0';
  return capi::ok();
}

detwanResult_t detwanCommSetTimeout(detwanComm_t comm, int64_t timeout_ms) {
  if (comm == nullptr) return null_argument("detwanCommSetTimeout", "comm");
  if (timeout_ms <= 0) {
    return capi::fail(detwanInvalidArgument,
                      fmt::format("detwanCommSetTimeout: timeout_ms is {}: must be > 0",
                                  timeout_ms));
  }
  comm->comm->set_timeout_ns(timeout_ms * 1'000'000);
  return capi::ok();
}

}  // extern "C"
