#include "dtype.hpp"

namespace aotpack {
namespace {

struct DtypeRow {
  aotpack_dtype_t dtype;
  const char* name;
  const char* safetensors_name;
  size_t size;
};

constexpr DtypeRow kDtypes[] = {
    {AOTPACK_DTYPE_FLOAT32, "float32", "F32", 4}, {AOTPACK_DTYPE_FLOAT64, "float64", "F64", 8},
    {AOTPACK_DTYPE_FLOAT16, "float16", "F16", 2}, {AOTPACK_DTYPE_BFLOAT16, "bfloat16", "BF16", 2},
    {AOTPACK_DTYPE_INT64, "int64", "I64", 8},     {AOTPACK_DTYPE_INT32, "int32", "I32", 4},
    {AOTPACK_DTYPE_INT16, "int16", "I16", 2},     {AOTPACK_DTYPE_INT8, "int8", "I8", 1},
    {AOTPACK_DTYPE_UINT8, "uint8", "U8", 1},      {AOTPACK_DTYPE_BOOL, "bool", "BOOL", 1},
};

const DtypeRow* find(aotpack_dtype_t dtype) {
  for (const DtypeRow& row : kDtypes) {
    if (row.dtype == dtype) return &row;
  }
  return nullptr;
}

}  // namespace

bool dtype_from_code(int32_t code, aotpack_dtype_t* out) {
  for (const DtypeRow& row : kDtypes) {
    if (static_cast<int32_t>(row.dtype) == code) {
      *out = row.dtype;
      return true;
    }
  }
  return false;
}

const char* dtype_name(aotpack_dtype_t dtype) {
  const DtypeRow* row = find(dtype);
  return row ? row->name : "unknown";
}

const char* dtype_safetensors_name(aotpack_dtype_t dtype) {
  const DtypeRow* row = find(dtype);
  return row ? row->safetensors_name : "unknown";
}

size_t dtype_size(aotpack_dtype_t dtype) {
  const DtypeRow* row = find(dtype);
  return row ? row->size : 0;
}

bool dtype_from_name(std::string_view name, aotpack_dtype_t* out) {
  for (const DtypeRow& row : kDtypes) {
    if (name == row.name) {
      *out = row.dtype;
      return true;
    }
  }
  return false;
}

bool dtype_from_safetensors_name(std::string_view name, aotpack_dtype_t* out) {
  for (const DtypeRow& row : kDtypes) {
    if (name == row.safetensors_name) {
      *out = row.dtype;
      return true;
    }
  }
  return false;
}

}  // namespace aotpack
