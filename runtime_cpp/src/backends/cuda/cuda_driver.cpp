#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

#include "dl_symbol.hpp"
#include "timing.hpp"

namespace aotpack {
namespace cuda {
namespace {

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
  if (!missing && !resolve_symbol(handle, symbol, &d->field)) missing = symbol;
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
  AOTPACK_RESOLVE(cuPointerGetAttributes, "cuPointerGetAttributes")
  AOTPACK_RESOLVE(cuLaunchKernel, "cuLaunchKernel")
  AOTPACK_RESOLVE(cuMemHostAlloc, "cuMemHostAlloc")
  AOTPACK_RESOLVE(cuMemFreeHost, "cuMemFreeHost")
  AOTPACK_RESOLVE(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2")
  AOTPACK_RESOLVE(cuEventCreate, "cuEventCreate")
  AOTPACK_RESOLVE(cuEventRecord, "cuEventRecord")
  AOTPACK_RESOLVE(cuEventSynchronize, "cuEventSynchronize")
  AOTPACK_RESOLVE(cuEventDestroy, "cuEventDestroy_v2")
  AOTPACK_RESOLVE(cuStreamWaitEvent, "cuStreamWaitEvent")
#undef AOTPACK_RESOLVE
  // Optional: without them a session launches its steps directly (no graph replay).
  resolve_symbol(handle, "cuStreamBeginCapture_v2", &d->cuStreamBeginCapture);
  resolve_symbol(handle, "cuStreamEndCapture", &d->cuStreamEndCapture);
  resolve_symbol(handle, "cuGraphInstantiateWithFlags", &d->cuGraphInstantiateWithFlags);
  resolve_symbol(handle, "cuGraphInstantiate_v2", &d->cuGraphInstantiate);
  resolve_symbol(handle, "cuGraphLaunch", &d->cuGraphLaunch);
  resolve_symbol(handle, "cuGraphExecDestroy", &d->cuGraphExecDestroy);
  resolve_symbol(handle, "cuGraphDestroy", &d->cuGraphDestroy);
  resolve_symbol(handle, "cuLaunchKernelEx", &d->cuLaunchKernelEx);
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
  std::call_once(once, [] {
    PartTimer timer("cuda driver (dlopen libcuda.so.1, cuInit)");
    result = load(&instance);
  });
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

Status pointer_attributes(const Driver& d, CUdeviceptr p, PointerAttributes* out) {
  *out = PointerAttributes();
  int attributes[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                      CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* values[] = {&out->context, &out->memory_type, &out->managed, &out->ordinal, &out->range_start, &out->range_size};
  return check(d, d.cuPointerGetAttributes(6, attributes, values, p), "cuPointerGetAttributes");
}

DeviceMemoryProblem device_memory_problem(const PointerAttributes& a, CUdeviceptr p, uint64_t bytes, int ordinal,
                                          CUcontext context) {
  if (a.memory_type == 0) return DeviceMemoryProblem::kUnknown;
  // Managed memory is readable from every device and context; other memory only where it was allocated.
  if (!a.managed && a.memory_type != CU_MEMORYTYPE_DEVICE) return DeviceMemoryProblem::kRegisteredHost;
  if (!a.managed && a.ordinal != ordinal) return DeviceMemoryProblem::kOtherDevice;
  if (!a.managed && a.context && a.context != context) return DeviceMemoryProblem::kOtherContext;
  if (a.range_size == 0) return DeviceMemoryProblem::kNone;  // the driver does not say where the allocation ends
  const CUdeviceptr end = a.range_start + a.range_size;
  if (p < a.range_start || p > end) return DeviceMemoryProblem::kOutsideAllocation;
  if (end - p < bytes) return DeviceMemoryProblem::kTooShort;
  return DeviceMemoryProblem::kNone;
}

Status check_device_memory(const PointerAttributes& a, CUdeviceptr p, uint64_t bytes, int ordinal, CUcontext context,
                           const std::string& what, const std::string& device) {
  switch (device_memory_problem(a, p, bytes, ordinal, context)) {
    case DeviceMemoryProblem::kNone: return Status();
    case DeviceMemoryProblem::kUnknown:
      return invalid_argument(what, " is not memory the CUDA driver knows (a host pointer?); this session takes "
                              "device memory (io_memory AOTPACK_MEMORY_DEVICE)");
    case DeviceMemoryProblem::kRegisteredHost:
      return invalid_argument(what, " is host memory registered with CUDA, not device memory; copy it to ", device,
                              " or create the session with io_memory AOTPACK_MEMORY_HOST");
    case DeviceMemoryProblem::kOtherDevice:
      return invalid_argument(what, " is memory of CUDA device ", a.ordinal, ", but the session runs on ", device);
    case DeviceMemoryProblem::kOtherContext:
      return invalid_argument(what, " was allocated in another CUDA context than the primary context of ", device,
                              ", which the session uses; allocate it in the primary context (as the CUDA runtime does)");
    case DeviceMemoryProblem::kOutsideAllocation:
      return invalid_argument(what, " lies outside the allocation the driver reports for it");
    case DeviceMemoryProblem::kTooShort:
      return invalid_argument(what, " is ", a.range_start + a.range_size - p,
                              " bytes before the end of its allocation, too few for the tensor's ", bytes, " bytes");
  }
  return internal_error("unknown device memory verdict");
}

}  // namespace cuda
}  // namespace aotpack
