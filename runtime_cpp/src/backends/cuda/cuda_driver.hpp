// The CUDA driver API, opened at run time: dlopen("libcuda.so.1") when a CUDA session is first asked for.
//
// The runtime is built without CUDA headers and never links against CUDA, so one build serves CPU-only and
// GPU hosts. The few driver types, constants and functions it uses are declared here by hand; they are the
// driver's stable ABI (cuda.h, CUDA 12/13), and each function is looked up by its versioned symbol name, the
// one cuda.h's macros select (cuMemAlloc -> cuMemAlloc_v2, ...).
#ifndef AOTPACK_SRC_BACKENDS_CUDA_CUDA_DRIVER_HPP_
#define AOTPACK_SRC_BACKENDS_CUDA_CUDA_DRIVER_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

#include "status.hpp"

namespace aotpack {
namespace cuda {

// ---- driver types (cuda.h) ------------------------------------------------------------------------------
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUgraphNode = struct CUgraphNode_st*;
using CUevent = struct CUevent_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;

// CUdevice_attribute values.
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
// CUfunction_attribute values.
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr unsigned int CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 2;
constexpr unsigned int CU_MEMHOSTALLOC_DEVICEMAP = 2;
// CUstreamCaptureMode: THREAD_LOCAL forbids unsafe calls (allocation, synchronisation) in the capturing thread
// only, so other threads' sessions keep running while one captures.
constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
// CUpointer_attribute values, and the CUmemorytype values CU_POINTER_ATTRIBUTE_MEMORY_TYPE reports.
constexpr int CU_POINTER_ATTRIBUTE_CONTEXT = 1;           // CUcontext
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;       // unsigned int (CUmemorytype)
constexpr int CU_POINTER_ATTRIBUTE_IS_MANAGED = 8;        // unsigned int (bool)
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;    // int
constexpr int CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11; // CUdeviceptr
constexpr int CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;       // size_t
constexpr unsigned int CU_MEMORYTYPE_HOST = 1;
constexpr unsigned int CU_MEMORYTYPE_DEVICE = 2;

// cuLaunchKernelEx's configuration (cuda.h's CUlaunchConfig and CUlaunchAttribute, CUDA 12.0+), for the one
// attribute aotpack sets: programmatic stream serialization (programmatic dependent launch, sm_90+), which lets
// a kernel's programs start while the previous kernel's last ones finish; the kernel waits (griddepcontrol.wait)
// before touching memory. The value is a 64-byte union in the driver's ABI.
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
};
static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute must match the driver's layout");
struct CUlaunchConfig {
  unsigned int grid_x, grid_y, grid_z;
  unsigned int block_x, block_y, block_z;
  unsigned int shared_bytes;
  CUstream stream;
  CUlaunchAttribute* attrs;
  unsigned int num_attrs;
};

// The driver functions aotpack calls, resolved once per process.
struct Driver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  // Unlike cuPointerGetAttribute, succeeds for a pointer CUDA does not know, leaving its attributes unset.
  CUresult (*cuPointerGetAttributes)(unsigned int, int*, void**, CUdeviceptr);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, CUstream, void**, void**);
  // Page-locked host memory, for the staging buffers of host I/O (asynchronous copies at full bandwidth).
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned int);
  CUresult (*cuMemFreeHost)(void*);
  // The device's address of page-locked memory allocated with CU_MEMHOSTALLOC_DEVICEMAP (the error flags).
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned int);
  // Events: the weight upload waits on one per staging buffer before refilling it; a session marks the end of
  // the runs it queues on callers' streams with one (aotpack_session_enqueue), which a run queued on another
  // stream waits for on the device.
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
  // CUDA graphs: optional (null where the driver lacks one); has_graphs() says whether all are there, and
  // sessions launch directly otherwise. One of the two instantiate forms suffices.
  CUresult (*cuStreamBeginCapture)(CUstream, int) = nullptr;                 // cuStreamBeginCapture_v2
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;  // 11.4+
  CUresult (*cuGraphInstantiate)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t) = nullptr;  // _v2, older
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  // Programmatic dependent launch: optional (CUDA 12.0+); kernels launch with cuLaunchKernel without it.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  bool has_graphs() const {
    return cuStreamBeginCapture && cuStreamEndCapture && (cuGraphInstantiateWithFlags || cuGraphInstantiate) &&
           cuGraphLaunch && cuGraphExecDestroy && cuGraphDestroy;
  }
  int version = 0;  // cuDriverGetVersion(), e.g. 12080 for CUDA 12.8
};

// The process's driver, loaded and initialised (cuInit) on first use. UNSUPPORTED, saying why, when
// libcuda.so.1 cannot be opened, lacks a function or has no device.
Status driver(const Driver** out);

// A failed driver call as a status: "<what>: CUDA_ERROR_X (description)". OK for CUDA_SUCCESS.
Status check(const Driver& d, CUresult result, const char* what);

// What the driver knows of a pointer; the defaults below for one it does not know.
struct PointerAttributes {
  CUcontext context = nullptr;     // the context it was allocated in (null for some allocations)
  unsigned int memory_type = 0;    // CU_MEMORYTYPE_*, 0: not CUDA memory
  unsigned int managed = 0;        // 1 for managed (unified) memory
  int ordinal = -1;                // the device it was allocated on
  CUdeviceptr range_start = 0;     // the allocation holding it, where the driver says
  size_t range_size = 0;
};
Status pointer_attributes(const Driver& d, CUdeviceptr p, PointerAttributes* out);

// Whether kernels in `context` on device `ordinal` may read `bytes` bytes at `p`, which the driver describes
// as `a`: kNone, or the first reason they may not. Allocates nothing, for the run path.
enum class DeviceMemoryProblem { kNone, kUnknown, kRegisteredHost, kOtherDevice, kOtherContext, kOutsideAllocation,
                                 kTooShort };
DeviceMemoryProblem device_memory_problem(const PointerAttributes& a, CUdeviceptr p, uint64_t bytes, int ordinal,
                                          CUcontext context);

// The same verdict as a status: OK, or INVALID_ARGUMENT saying why not, with `what` naming the pointer and
// `device` the device.
Status check_device_memory(const PointerAttributes& a, CUdeviceptr p, uint64_t bytes, int ordinal, CUcontext context,
                           const std::string& what, const std::string& device);

}  // namespace cuda
}  // namespace aotpack

#define AOTPACK_CUDA_CHECK(d, call, what) AOTPACK_RETURN_IF_ERROR(::aotpack::cuda::check((d), (d).call, (what)))

#endif  // AOTPACK_SRC_BACKENDS_CUDA_CUDA_DRIVER_HPP_
