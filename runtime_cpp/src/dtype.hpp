// Element types: their names in program.json ("float32"), in safetensors ("F32"), and their sizes.
#ifndef AOTPACK_SRC_DTYPE_HPP_
#define AOTPACK_SRC_DTYPE_HPP_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "aotpack.h"

namespace aotpack {

const char* dtype_name(aotpack_dtype_t dtype);              // "float32", ...; "unknown" otherwise
const char* dtype_safetensors_name(aotpack_dtype_t dtype);  // "F32", ...; "unknown" otherwise
size_t dtype_size(aotpack_dtype_t dtype);                   // 0 if unknown
bool dtype_from_name(std::string_view name, aotpack_dtype_t* out);
// The dtype whose aotpack_dtype_t value is `code`; false for a value no dtype has (checked before converting,
// see c_enum.hpp).
bool dtype_from_code(int32_t code, aotpack_dtype_t* out);
bool dtype_from_safetensors_name(std::string_view name, aotpack_dtype_t* out);

}  // namespace aotpack

#endif  // AOTPACK_SRC_DTYPE_HPP_
