// lastmile — errors: one exception family, one code per kind of failure (STYLE §7).
#pragma once

#include <stdexcept>
#include <string>

namespace lastmile {

// Each code maps 1:1 to a C status and a Python exception.
enum class ErrorCode {
  invalid_argument,  // a request parameter or a batch field is out of its range
  invalid_logits,    // logits of the wrong shape or dtype, or holding NaN / +inf
  unsupported,       // a valid request this build cannot serve
  out_of_memory,
  internal,  // a broken invariant inside lastmile: a bug, please report it
};

// Every exception lastmile throws. Messages name who, what, the rule and the value, e.g.
// `request 3: top_p must be in (0, 1], got 1.5`.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// A bad parameter or input: the caller can fix it.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message)
      : Error(ErrorCode::invalid_argument, message) {}
  InvalidArgument(ErrorCode code, const std::string& message) : Error(code, message) {}
};

}  // namespace lastmile
