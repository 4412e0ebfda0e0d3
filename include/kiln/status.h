// Errors as values: Status for operations, Result<T> for operations that return something.
// Messages name the model, node, input and the expected vs actual thing.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace kiln {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    return s;
  }
  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return message_; }
  // Adds context in front: "node 'conv1' (Conv): " + message.
  Status with_context(const std::string& context) const {
    return failed_ ? error(context + ": " + message_) : *this;
  }

 private:
  bool failed_ = false;
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
