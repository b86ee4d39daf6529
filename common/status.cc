#include "common/status.h"

#include <string>

namespace detwan::common {

std::string_view to_string(Status status) noexcept {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kBusy:
      return "busy";
    case Status::kDropped:
      return "dropped";
    case Status::kMalformed:
      return "malformed";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kClosed:
      return "closed";
  }
  return "unknown status";
}

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kConfig:
      return "config";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kAlreadyExists:
      return "already exists";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown error";
}

std::string Error::describe() const {
  std::string text(to_string(code));
  text += ": ";
  text += message;
  return text;
}

Failure::Failure(Error error) : std::runtime_error(error.describe()), error_(std::move(error)) {}

}  // namespace detwan::common
