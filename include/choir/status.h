// Status and Result<T>: how every choir call reports failure.
//
// A Status is either OK (a null pointer: free to create, copy and test) or an
// error carrying a stable numbered Code from error_codes.h plus a message that
// names what failed (rank, peer, address, collective, sequence number...).
// choir never throws across its API; functions that can fail return Status or
// Result<T> and are [[nodiscard]].
//
// Thread-safety: Status and Result are values; a const Status may be read from
// many threads (the error state is immutable and shared).
#ifndef CHOIR_STATUS_H_
#define CHOIR_STATUS_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "choir/error_codes.h"

namespace choir {

enum class Code : int {
#define CHOIR_X_ENUM(name, number, retry, summary, causes, fix) k##name = number,
  CHOIR_ERROR_CODES(CHOIR_X_ENUM)
#undef CHOIR_X_ENUM
};

// What the error table says about one code.
struct ErrorInfo {
  Code code;
  int number;
  const char* name;      // "CollectiveMismatch"
  bool retryable;        // may succeed if the whole operation is tried again
  const char* summary;   // one sentence
  const char* causes;    // likely causes
  const char* fix;       // what to do
};

// The table row for `code`; nullptr for a number that is not in the table.
const ErrorInfo* FindErrorInfo(int number);
const ErrorInfo& GetErrorInfo(Code code);
// Every row of the table in number order (including Ok).
const std::vector<ErrorInfo>& AllErrorInfos();
// Looks up "401", "E401" or "CollectiveMismatch" (case-insensitive).
const ErrorInfo* FindErrorInfo(std::string_view text);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  int number() const { return static_cast<int>(code()); }
  // The message without the code prefix ("" when OK).
  const std::string& message() const;
  // "E401 CollectiveMismatch: <message>" or "OK".
  std::string ToString() const;

  // Returns a copy whose message starts with `context` ("connecting to rank 3: ").
  Status WithContext(std::string_view context) const;

  // Marks the status as consumed on purpose.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    Code code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

// Factories named after the most common codes; the rest use Status(code, msg).
inline Status InvalidArgument(std::string msg) {
  return Status(Code::kInvalidArgument, std::move(msg));
}
inline Status InternalError(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
// A SystemError carrying strerror(err) and the failed call's description.
Status ErrnoError(Code code, int err, std::string_view what);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = InternalError("Result constructed from an OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace choir

#define CHOIR_STATUS_CONCAT_INNER(a, b) a##b
#define CHOIR_STATUS_CONCAT(a, b) CHOIR_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` yields a non-OK Status.
#define CHOIR_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::choir::Status choir_status_ = (expr);         \
    if (!choir_status_.ok()) return choir_status_;  \
  } while (0)

// `lhs = value of expr` or return its Status.
#define CHOIR_ASSIGN_OR_RETURN(lhs, expr)                                       \
  auto CHOIR_STATUS_CONCAT(choir_result_, __LINE__) = (expr);                   \
  if (!CHOIR_STATUS_CONCAT(choir_result_, __LINE__).ok())                       \
    return CHOIR_STATUS_CONCAT(choir_result_, __LINE__).status();               \
  lhs = std::move(CHOIR_STATUS_CONCAT(choir_result_, __LINE__)).value()

#endif  // CHOIR_STATUS_H_
