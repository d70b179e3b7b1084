// Status: how every internal function reports failure (no exceptions), and its conversion to the C API's
// aotpack_status_t at the boundary.
#ifndef AOTPACK_SRC_STATUS_HPP_
#define AOTPACK_SRC_STATUS_HPP_

#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "aotpack.h"

// The C API's opaque status: a code and a message, owned by the caller once returned.
struct aotpack_status {
  aotpack_status_code_t code;
  std::string message;
};

namespace aotpack {

// OK (the default, which allocates nothing) or a code with a message that says what was wrong and where.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(aotpack_status_code_t code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == AOTPACK_OK; }
  aotpack_status_code_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // The same status with "prefix: " in front of its message (OK stays OK).
  Status prefixed(std::string_view prefix) const;

 private:
  aotpack_status_code_t code_ = AOTPACK_OK;
  std::string message_;
};

// Concatenates anything streamable into one string: str_cat("buffer ", id, " is ", what).
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// `s` in double quotes, for names in messages.
std::string quoted(std::string_view s);

template <typename... Args>
Status invalid_argument(const Args&... a) { return Status(AOTPACK_INVALID_ARGUMENT, str_cat(a...)); }
template <typename... Args>
Status out_of_range(const Args&... a) { return Status(AOTPACK_OUT_OF_RANGE, str_cat(a...)); }
template <typename... Args>
Status not_found(const Args&... a) { return Status(AOTPACK_NOT_FOUND, str_cat(a...)); }
template <typename... Args>
Status unsupported(const Args&... a) { return Status(AOTPACK_UNSUPPORTED, str_cat(a...)); }
template <typename... Args>
Status data_loss(const Args&... a) { return Status(AOTPACK_DATA_LOSS, str_cat(a...)); }
template <typename... Args>
Status resource_exhausted(const Args&... a) { return Status(AOTPACK_RESOURCE_EXHAUSTED, str_cat(a...)); }
template <typename... Args>
Status internal_error(const Args&... a) { return Status(AOTPACK_INTERNAL, str_cat(a...)); }

// NULL for OK, else a new aotpack_status the caller frees with aotpack_status_free. Never throws: if even
// the status cannot be allocated, returns a static out-of-memory status that aotpack_status_free ignores.
aotpack_status_t to_c_status(const Status& status);

// The static status to_c_status returns when out of memory; aotpack_status_free must not delete it.
extern aotpack_status g_out_of_memory_status;

}  // namespace aotpack

#define AOTPACK_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::aotpack::Status aotpack_status_ = (expr); \
    if (!aotpack_status_.ok()) return aotpack_status_; \
  } while (0)

#endif  // AOTPACK_SRC_STATUS_HPP_
