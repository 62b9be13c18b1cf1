#pragma once
// Errors as values at boundaries: parsing, I/O, configuration and collector calls.
#include <string>
#include <utility>
#include <variant>

namespace sonde {

enum class Errc {
  io,           ///< a file could not be read or written
  parse,        ///< text did not have the expected shape
  config,       ///< a configuration file or flag is malformed
  unavailable,  ///< a collector or resource cannot work on this node
  vanished,     ///< a process went away while being read (normal)
  restarting,   ///< a collector's child process is being restarted: no values, not a failure
  failed,       ///< any other failure
};

struct Error {
  Errc code = Errc::failed;
  std::string message;  ///< names the file, line and what was expected
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

inline Error make_error(Errc code, std::string message) {
  return Error{code, std::move(message)};
}

}  // namespace sonde
