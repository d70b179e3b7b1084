#include "dtypes.hpp"

namespace aotpack_triton {
namespace {

// Every aotpack dtype (aotpack.h) has a Triton type of the same width and meaning.
const DtypeSpelling kDtypes[] = {
    {AOTPACK_DTYPE_FLOAT32, TRITONSERVER_TYPE_FP32, "TYPE_FP32"},
    {AOTPACK_DTYPE_FLOAT64, TRITONSERVER_TYPE_FP64, "TYPE_FP64"},
    {AOTPACK_DTYPE_FLOAT16, TRITONSERVER_TYPE_FP16, "TYPE_FP16"},
    {AOTPACK_DTYPE_BFLOAT16, TRITONSERVER_TYPE_BF16, "TYPE_BF16"},
    {AOTPACK_DTYPE_INT64, TRITONSERVER_TYPE_INT64, "TYPE_INT64"},
    {AOTPACK_DTYPE_INT32, TRITONSERVER_TYPE_INT32, "TYPE_INT32"},
    {AOTPACK_DTYPE_INT16, TRITONSERVER_TYPE_INT16, "TYPE_INT16"},
    {AOTPACK_DTYPE_INT8, TRITONSERVER_TYPE_INT8, "TYPE_INT8"},
    {AOTPACK_DTYPE_UINT8, TRITONSERVER_TYPE_UINT8, "TYPE_UINT8"},
    {AOTPACK_DTYPE_BOOL, TRITONSERVER_TYPE_BOOL, "TYPE_BOOL"},
};

}  // namespace

const DtypeSpelling* FindDtype(aotpack_dtype_t dtype) {
  for (const auto& d : kDtypes) {
    if (d.aotpack == dtype) return &d;
  }
  return nullptr;
}

std::string ConfigName(TRITONSERVER_DataType dtype) {
  for (const auto& d : kDtypes) {
    if (d.triton == dtype) return d.config_name;
  }
  return "TYPE_INVALID";
}

}  // namespace aotpack_triton
