// Turning failures into TRITONSERVER_Error objects and log lines, in one place.
#pragma once

#include <string>

#include "aotpack.h"
#include "triton_api.h"

namespace aotpack_triton {

// A new Triton error (the server takes ownership when it is returned from an entry point).
inline TRITONSERVER_Error* Error(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, message.c_str());
}

// The Triton error code for an aotpack status: the caller's mistakes are INVALID_ARG, so that clients see
// a 400 over HTTP (INVALID_ARGUMENT over gRPC), as for Triton's own input checks.
TRITONSERVER_Error_Code TritonCode(aotpack_status_code_t code);

// Frees `status` and returns it as a Triton error prefixed by `context` (nullptr for OK).
TRITONSERVER_Error* FromStatus(aotpack_status_t status, const std::string& context);

void Log(TRITONSERVER_LogLevel level, const std::string& message);

}  // namespace aotpack_triton

// Returns from the enclosing function with `expr`'s error, if any.
#define AOTPACK_TRITON_RETURN_IF_ERROR(expr)      \
  do {                                            \
    TRITONSERVER_Error* aotpack_triton_err_ = (expr); \
    if (aotpack_triton_err_) return aotpack_triton_err_; \
  } while (0)
