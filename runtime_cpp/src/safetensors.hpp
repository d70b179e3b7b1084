// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header, then the tensors' bytes. Hand-written reader and writer, since the runtime depends
// on no library beyond the C++ standard library.
#ifndef AOTPACK_SRC_SAFETENSORS_HPP_
#define AOTPACK_SRC_SAFETENSORS_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aotpack.h"
#include "status.hpp"

namespace aotpack::safetensors {

// One tensor of a safetensors file; `data` points into the caller's bytes.
struct TensorView {
  std::string name;
  aotpack_dtype_t dtype = AOTPACK_DTYPE_FLOAT32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t size = 0;  // bytes == product(shape) * element size, checked
};

// Parses the header of the safetensors bytes [data, data + size) and checks every tensor lies in the data
// area with the size its dtype and shape give. Errors are DATA_LOSS (UNSUPPORTED for an unknown dtype) and
// do not name the file (the caller does).
Status parse(const uint8_t* data, size_t size, std::vector<TensorView>* out);

// Writes `tensors` (data and size taken as given) to `path`, header padded with spaces to a multiple of 8.
Status write_file(const std::string& path, const std::vector<TensorView>& tensors);

}  // namespace aotpack::safetensors

#endif  // AOTPACK_SRC_SAFETENSORS_HPP_
