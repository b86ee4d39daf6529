#pragma once
// Private to the C API (capi.cc, capi_ops.cc): the handle structs and the error mapping.
#include <atomic>
#include <cstring>
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

// The int a C caller passed for an enum argument or field. A value outside the enum's range is
// undefined behaviour when read through the C++ enum type (UBSan reports it), and a C caller may
// pass any int, so validation reads it as the int it is.
template <typename Enum>
int enum_value(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

}  // namespace detwan::collectives::capi
