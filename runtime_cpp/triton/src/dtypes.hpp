// One table for the three spellings of a tensor dtype the backend meets: aotpack's, Triton's data type enum
// (requests and responses) and the model configuration's "TYPE_*" names.
#pragma once

#include <string>

#include "aotpack.h"
#include "triton_api.h"

namespace aotpack_triton {

struct DtypeSpelling {
  aotpack_dtype_t aotpack;
  TRITONSERVER_DataType triton;
  const char* config_name;
};

// The entry for an aotpack dtype, or nullptr when Triton has no equal type.
const DtypeSpelling* FindDtype(aotpack_dtype_t dtype);
// The config name of a Triton data type ("TYPE_FP32"), or "TYPE_INVALID".
std::string ConfigName(TRITONSERVER_DataType dtype);

}  // namespace aotpack_triton
