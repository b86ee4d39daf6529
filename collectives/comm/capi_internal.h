#pragma once
// Private to the C API (capi.cc, capi_ops.cc): the handle structs and the error mapping.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "collectives/comm/communicator.h"
#include "detwan/collectives.h"

struct detwanComm {
  std::unique_ptr<detwan::collectives::Communicator> comm;
  // Shared with the requests of this communicator, which may outlive it: set by
  // detwanCommAbort so that their failures map to detwanAborted.
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
};

struct detwanRequest {
  struct Part {
    detwan::collectives::Request request;
    std::shared_ptr<std::atomic<bool>> aborted;
  };
  std::vector<Part> parts;  // one per communicator (GroupEndAsync may span several)
};

namespace detwan::collectives::capi {

// The thread's last error message (detwanGetLastError); returns `result` for chaining.
detwanResult_t fail(detwanResult_t result, const std::string& message);
detwanResult_t ok();
const char* last_error_message();
// Errors of setup and argument checks (returned before any operation ran).
detwanResult_t fail_setup(const Error& error);
// Errors of an operation that ran (or of a communicator in error).
detwanResult_t fail_op(const Error& error, bool aborted);
detwanResult_t to_result(const AsyncError& error);

}  // namespace detwan::collectives::capi
