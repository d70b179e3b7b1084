#include "status.hpp"

#include <new>

namespace aotpack {

Status Status::prefixed(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(code_, str_cat(prefix, ": ", message_));
}

std::string quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

// Returned when allocating a status fails; aotpack_status_free recognizes and keeps it.
aotpack_status g_out_of_memory_status{AOTPACK_RESOURCE_EXHAUSTED, "out of memory"};

aotpack_status_t to_c_status(const Status& status) {
  if (status.ok()) return nullptr;
  try {
    return new aotpack_status{status.code(), status.message()};
  } catch (...) {
    return &g_out_of_memory_status;
  }
}

}  // namespace aotpack
