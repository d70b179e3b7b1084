// The entry points Triton calls (tritonbackend.h): the backend's lifecycle over ModelState and InstanceState.
// No C++ exception leaves them: each body runs inside Guard, which turns one into an INTERNAL error.
#include <exception>
#include <new>
#include <string>

#include "instance_state.hpp"
#include "model_state.hpp"
#include "triton_api.h"
#include "triton_status.hpp"

using aotpack_triton::Error;
using aotpack_triton::InstanceState;
using aotpack_triton::ModelState;

namespace {

template <typename F>
TRITONSERVER_Error* Guard(const char* entry, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Error(TRITONSERVER_ERROR_UNAVAILABLE, std::string(entry) + ": out of memory");
  } catch (const std::exception& e) {
    return Error(TRITONSERVER_ERROR_INTERNAL, std::string(entry) + ": " + e.what() + " (a bug in aotpack: please report it)");
  } catch (...) {
    return Error(TRITONSERVER_ERROR_INTERNAL, std::string(entry) + ": unknown exception (a bug in aotpack)");
  }
}

}  // namespace

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  return Guard("TRITONBACKEND_Initialize", [&]() -> TRITONSERVER_Error* {
    const char* name = nullptr;
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_BackendName(backend, &name));
    uint32_t major = 0, minor = 0;
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
    if (major != AOTPACK_TRITONBACKEND_API_MAJOR || minor < AOTPACK_TRITONBACKEND_API_MINOR) {
      return Error(TRITONSERVER_ERROR_UNSUPPORTED,
                   std::string("backend ") + name + ": this Triton server implements backend API " +
                       std::to_string(major) + "." + std::to_string(minor) + "; libtriton_aotpack.so needs " +
                       std::to_string(AOTPACK_TRITONBACKEND_API_MAJOR) + "." +
                       std::to_string(AOTPACK_TRITONBACKEND_API_MINOR) + " or a later minor (Triton 2.44 or newer)");
    }
    aotpack_triton::Log(TRITONSERVER_LOG_INFO, std::string("backend ") + name + ": backend API " +
                                                   std::to_string(major) + "." + std::to_string(minor));
    return nullptr;
  });
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend*) { return nullptr; }

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  return Guard("TRITONBACKEND_ModelInitialize", [&]() -> TRITONSERVER_Error* {
    ModelState* state = nullptr;
    AOTPACK_TRITON_RETURN_IF_ERROR(ModelState::Create(model, &state));
    TRITONSERVER_Error* error = TRITONBACKEND_ModelSetState(model, state);
    if (error) delete state;
    return error;
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  return Guard("TRITONBACKEND_ModelFinalize", [&]() -> TRITONSERVER_Error* {
    void* state = nullptr;
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
    delete static_cast<ModelState*>(state);
    return nullptr;
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  return Guard("TRITONBACKEND_ModelInstanceInitialize", [&]() -> TRITONSERVER_Error* {
    TRITONBACKEND_Model* model = nullptr;
    void* model_state = nullptr;
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &model_state));
    InstanceState* state = nullptr;
    AOTPACK_TRITON_RETURN_IF_ERROR(InstanceState::Create(instance, static_cast<ModelState*>(model_state), &state));
    TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceSetState(instance, state);
    if (error) delete state;
    return error;
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  return Guard("TRITONBACKEND_ModelInstanceFinalize", [&]() -> TRITONSERVER_Error* {
    void* state = nullptr;
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
    delete static_cast<InstanceState*>(state);
    return nullptr;
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, const uint32_t request_count) {
  // An error returned from here hands the requests back to Triton, which answers them; so only a failure before
  // Execute took ownership may return one.
  void* state = nullptr;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceState(instance, &state);
  if (error) return error;
  return Guard("TRITONBACKEND_ModelInstanceExecute", [&]() -> TRITONSERVER_Error* {
    static_cast<InstanceState*>(state)->Execute(requests, request_count);
    return nullptr;
  });
}

}  // extern "C"
