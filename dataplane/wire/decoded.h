#pragma once
// The result of a wire decoder: a parsed value, or the DropReason the receiver counts.
// A small stand-in for std::expected<T, DropReason> so the wire core builds with clang 14
// (libFuzzer), whose libstdc++ does not provide std::expected.
#include <utility>

#include "dataplane/wire/drop_reason.h"

namespace detwan::dataplane::wire {

template <typename T>
class [[nodiscard]] Decoded {
 public:
  // Implicit on purpose: a decoder writes `return DropReason::kTooShort;` or `return view;`.
  constexpr Decoded(T value) noexcept
      : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  constexpr Decoded(DropReason reason) noexcept : reason_(reason), ok_(false) {}  // NOLINT

  [[nodiscard]] constexpr bool ok() const noexcept { return ok_; }
  constexpr explicit operator bool() const noexcept { return ok_; }

  // Turns this result into a rejection (a decoder that fills its result in place and returns
  // that one object on every path, so the compiler builds it in the caller's slot: NRVO).
  constexpr void reject(DropReason reason) noexcept {
    reason_ = reason;
    ok_ = false;
  }

  // Why the input was rejected. Only meaningful when !ok().
  [[nodiscard]] constexpr DropReason error() const noexcept { return reason_; }

  // The parsed value. Only meaningful when ok(); on an error it is a value-initialized T, or
  // what the decoder had filled in before it rejected the input (reading it is a caller bug,
  // never undefined behaviour).
  [[nodiscard]] constexpr const T& value() const noexcept { return value_; }
  [[nodiscard]] constexpr T& value() noexcept { return value_; }
  constexpr const T& operator*() const noexcept { return value_; }
  constexpr T& operator*() noexcept { return value_; }
  constexpr const T* operator->() const noexcept { return &value_; }

 private:
  T value_{};
  DropReason reason_ = DropReason::kCount;
  bool ok_ = true;
};

}  // namespace detwan::dataplane::wire
