// result<T>: a value or a proto::error (std::expected arrives with C++23); result<void>: success
// or an error.
#pragma once

#include <cassert>
#include <optional>
#include <utility>
#include <variant>

#include "protocol/errors.hpp"

namespace fusee::proto {

template <class T>
class [[nodiscard]] result {
public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(error err) : v_(std::in_place_index<1>, std::move(err)) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    assert(has_value());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(has_value());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(has_value());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error& err() const {
    assert(!has_value());
    return std::get<1>(v_);
  }

private:
  std::variant<T, error> v_;
};

/// A success without a value, or an error.
template <>
class [[nodiscard]] result<void> {
public:
  result() = default;
  result(error err) : err_(std::move(err)) {}

  bool has_value() const { return !err_; }
  explicit operator bool() const { return has_value(); }

  const error& err() const {
    assert(err_);
    return *err_;
  }

private:
  std::optional<error> err_;
};

/// Makes an error value: `return fail(err_code::bad_body, "...")`.
inline error fail(err_code code, std::string message) {
  return error{code, std::move(message)};
}

}  // namespace fusee::proto
