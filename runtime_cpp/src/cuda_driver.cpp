#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace aotpack {
namespace cuda {
namespace {

template <typename F>
bool resolve(void* handle, const char* name, F* out) {
  void* p = dlsym(handle, name);
  *out = reinterpret_cast<F>(p);
  return p != nullptr;
}

Status load(Driver* d) {
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace of the host process.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return unsupported("CUDA is not available: cannot open the NVIDIA driver library libcuda.so.1 (",
                       err ? err : "not found", "); install the NVIDIA driver or use the CPU device");
  }
  // Versioned names, as cuda.h's macros map them (cuMemAlloc is cuMemAlloc_v2 since CUDA 3.2, ...).
  const char* missing = nullptr;
#define AOTPACK_RESOLVE(field, symbol) \
  if (!missing && !resolve(handle, symbol, &d->field)) missing = symbol;
  AOTPACK_RESOLVE(cuInit, "cuInit")
  AOTPACK_RESOLVE(cuDriverGetVersion, "cuDriverGetVersion")
  AOTPACK_RESOLVE(cuGetErrorName, "cuGetErrorName")
  AOTPACK_RESOLVE(cuGetErrorString, "cuGetErrorString")
  AOTPACK_RESOLVE(cuDeviceGetCount, "cuDeviceGetCount")
  AOTPACK_RESOLVE(cuDeviceGet, "cuDeviceGet")
  AOTPACK_RESOLVE(cuDeviceGetName, "cuDeviceGetName")
  AOTPACK_RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute")
  AOTPACK_RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
  AOTPACK_RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
  AOTPACK_RESOLVE(cuCtxSetCurrent, "cuCtxSetCurrent")
  AOTPACK_RESOLVE(cuModuleLoadData, "cuModuleLoadData")
  AOTPACK_RESOLVE(cuModuleUnload, "cuModuleUnload")
  AOTPACK_RESOLVE(cuModuleGetFunction, "cuModuleGetFunction")
  AOTPACK_RESOLVE(cuFuncSetAttribute, "cuFuncSetAttribute")
  AOTPACK_RESOLVE(cuMemAlloc, "cuMemAlloc_v2")
  AOTPACK_RESOLVE(cuMemFree, "cuMemFree_v2")
  AOTPACK_RESOLVE(cuMemcpyHtoD, "cuMemcpyHtoD_v2")
  AOTPACK_RESOLVE(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
  AOTPACK_RESOLVE(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
  AOTPACK_RESOLVE(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
  AOTPACK_RESOLVE(cuMemsetD8Async, "cuMemsetD8Async")
  AOTPACK_RESOLVE(cuStreamCreate, "cuStreamCreate")
  AOTPACK_RESOLVE(cuStreamDestroy, "cuStreamDestroy_v2")
  AOTPACK_RESOLVE(cuStreamSynchronize, "cuStreamSynchronize")
  AOTPACK_RESOLVE(cuLaunchKernel, "cuLaunchKernel")
#undef AOTPACK_RESOLVE
  if (missing) {
    dlclose(handle);
    return unsupported("the NVIDIA driver library libcuda.so.1 lacks ", missing, "; the driver is too old for aotpack");
  }
  CUresult r = d->cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE) return unsupported("CUDA is not available: the NVIDIA driver found no device");
  AOTPACK_RETURN_IF_ERROR(check(*d, r, "cuInit"));
  AOTPACK_RETURN_IF_ERROR(check(*d, d->cuDriverGetVersion(&d->version), "cuDriverGetVersion"));
  // The handle stays open for the life of the process: modules and contexts may outlive any one model.
  return Status();
}

}  // namespace

Status driver(const Driver** out) {
  static std::once_flag once;
  static Driver instance;
  static Status result;
  std::call_once(once, [] { result = load(&instance); });
  if (!result.ok()) return result;
  *out = &instance;
  return Status();
}

Status check(const Driver& d, CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return Status();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName) d.cuGetErrorName(result, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(result, &text);
  std::string message = str_cat(what, " failed: ", name ? name : "CUDA error", " (", result,
                                text ? std::string(": ") + text : std::string(), ")");
  // Out of device memory is the caller's resource problem; everything else is reported as internal.
  if (result == 2) return resource_exhausted(message);
  return internal_error(message);
}

}  // namespace cuda
}  // namespace aotpack
