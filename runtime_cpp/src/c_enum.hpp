// Enum values that C callers give the runtime. C lets any int live in an enum object, while in C++ loading a
// value outside the enumerators' range is undefined behaviour (UBSan: "load of value 7, which is not a valid
// value for type 'aotpack_memory_t'"): the runtime reads a caller's enums as integers, checks them, and only
// then converts.
#ifndef AOTPACK_SRC_C_ENUM_HPP_
#define AOTPACK_SRC_C_ENUM_HPP_

#include <cstdint>
#include <cstring>

namespace aotpack {

// The int stored in a C enum object, read without loading it as the enum type.
template <typename E>
int32_t c_enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "C enums are int-sized here");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

}  // namespace aotpack

#endif  // AOTPACK_SRC_C_ENUM_HPP_
