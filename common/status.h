#pragma once
// Two error tiers (docs/errors.md):
//  * datapath: functions return a [[nodiscard]] `Status`, count the reason and move on. They
//    never throw and never allocate to report an error.
//  * control plane / setup: functions return `Result<T>` (std::expected<T, Error>) or throw
//    `detwan::common::Failure`; a boundary (main(), an API entry point) turns it into one clear
//    message naming what was wrong.
#include <cstdint>
#include <expected>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace detwan::common {

// Datapath status. "kBusy" (try again) is a normal result, not an error.
enum class [[nodiscard]] Status : uint8_t {
  kOk = 0,
  kBusy,           // resource momentarily exhausted (queue, ring, pool); retry later
  kDropped,        // the packet was consumed and dropped; the reason is counted by the callee
  kMalformed,      // input from the network failed validation
  kInvalidArgument,
  kClosed,         // peer or device went away
};

std::string_view to_string(Status status) noexcept;

// Control-plane error: a category plus a message that names the offending thing.
enum class ErrorCode : uint8_t {
  kInvalidArgument,
  kConfig,
  kNotFound,
  kAlreadyExists,
  kIo,
  kUnavailable,
  kTimeout,
  kInternal,
};

std::string_view to_string(ErrorCode code) noexcept;

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  // "config: file.yaml:3:5: field 'wan.delay': ..."
  [[nodiscard]] std::string describe() const;
};

template <typename T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> make_error(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

// Exception carrying an Error, for setup code where unwinding to one boundary is clearer than
// threading Result through every call. Never thrown on a datapath.
class Failure : public std::runtime_error {
 public:
  explicit Failure(Error error);
  [[nodiscard]] const Error& error() const noexcept { return error_; }

 private:
  Error error_;
};

}  // namespace detwan::common
