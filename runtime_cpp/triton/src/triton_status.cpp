#include "triton_status.hpp"

namespace aotpack_triton {

TRITONSERVER_Error_Code TritonCode(aotpack_status_code_t code) {
  switch (code) {
    case AOTPACK_OK: return TRITONSERVER_ERROR_UNKNOWN;  // not reached: OK is no error
    case AOTPACK_INVALID_ARGUMENT:
    case AOTPACK_OUT_OF_RANGE: return TRITONSERVER_ERROR_INVALID_ARG;
    case AOTPACK_NOT_FOUND: return TRITONSERVER_ERROR_NOT_FOUND;
    case AOTPACK_UNSUPPORTED: return TRITONSERVER_ERROR_UNSUPPORTED;
    case AOTPACK_RESOURCE_EXHAUSTED: return TRITONSERVER_ERROR_UNAVAILABLE;
    case AOTPACK_DATA_LOSS:
    case AOTPACK_INTERNAL: return TRITONSERVER_ERROR_INTERNAL;
  }
  return TRITONSERVER_ERROR_INTERNAL;
}

TRITONSERVER_Error* FromStatus(aotpack_status_t status, const std::string& context) {
  if (!status) return nullptr;
  TRITONSERVER_Error* error =
      Error(TritonCode(aotpack_status_code(status)), context + aotpack_status_message(status));
  aotpack_status_free(status);
  return error;
}

void Log(TRITONSERVER_LogLevel level, const std::string& message) {
  if (!TRITONSERVER_LogIsEnabled(level)) return;
  TRITONSERVER_Error* error = TRITONSERVER_LogMessage(level, "aotpack", 0, message.c_str());
  if (error) TRITONSERVER_ErrorDelete(error);
}

}  // namespace aotpack_triton
