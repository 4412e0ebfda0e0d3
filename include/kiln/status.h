// Errors as values: Status for operations, Result<T> for operations that return something.
// Messages name the model, node, input and the expected vs actual thing.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace kiln {

// What kind of failure a Status is, so that callers (the CLI's exit code, the Python package's
// exception classes) can tell a bad model from a bad input without reading the message.
enum class StatusCode {
  kOk = 0,
  kFailed,             // not classified further: what an error is unless its origin says more
  kInvalidArgument,    // the caller's input: a wrong dtype, rank, shape or name, a bad option
  kInvalidModel,       // the model: unparsable, inconsistent, or failing its checks
  kNotFound,           // a file (model, external data, input) that does not exist
  kNotImplemented,     // valid, but kiln has no kernel or support for it
  kOutOfRange,         // an index or size beyond what the data or the format allows
  kResourceExhausted,  // memory or another limit
  kInternal,           // a bug in kiln
};

// "InvalidArgument" for kInvalidArgument, ...: the names the CLI and the Python package show.
const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return error(StatusCode::kFailed, std::move(message)); }
  static Status error(StatusCode code, std::string message) {
    Status s;
    s.code_ = code == StatusCode::kOk ? StatusCode::kFailed : code;
    s.message_ = std::move(message);
    return s;
  }
  static Status invalid_argument(std::string m) { return error(StatusCode::kInvalidArgument, std::move(m)); }
  static Status invalid_model(std::string m) { return error(StatusCode::kInvalidModel, std::move(m)); }
  static Status not_implemented(std::string m) { return error(StatusCode::kNotImplemented, std::move(m)); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Adds context in front: "node 'conv1' (Conv): " + message; the code stays.
  Status with_context(const std::string& context) const {
    return is_ok() ? *this : error(code_, context + ": " + message_);
  }
  // The same error with `code` when it is still unclassified (kFailed): a boundary such as model
  // loading says what a failure below it means without overriding a more precise code.
  Status with_default_code(StatusCode code) const {
    return code_ == StatusCode::kFailed ? error(code, message_) : *this;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must be an error
  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

#define KILN_RETURN_IF_ERROR(expr)          \
  do {                                      \
    ::kiln::Status _kiln_st = (expr);       \
    if (!_kiln_st.is_ok()) return _kiln_st; \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.is_ok()) return tmp.status();           \
  lhs = std::move(tmp).value()

// Expands to several statements (it declares `lhs` in the enclosing scope): never use it as the
// unbraced body of an if/for/while.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(_kiln_res_, __LINE__), lhs, expr)

// Returns an error built from a message stream when cond is false.
#define KILN_CHECK(cond, msg)                                       \
  do {                                                              \
    if (!(cond)) return ::kiln::Status::error(std::string() + msg); \
  } while (0)
