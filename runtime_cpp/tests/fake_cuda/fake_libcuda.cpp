/* A stand-in for the NVIDIA driver (libcuda.so.1) with the few functions the runtime resolves, for testing the
 * CUDA backend's mechanics on a machine without a GPU: device memory is host memory, modules and functions
 * are names, and kernels do nothing (their outputs are whatever the memory held). One device, compute
 * capability 9.0, driver 13.2.
 *
 * With FAKE_CUDA_TRACE=<file> every call is appended to the file, one line each, with device pointers written
 * as allocation number and offset (d3+256) so that two runs of the same program give the same text: a trace
 * of the runtime's launches, copies and checks that tests compare across versions of the runtime.
 *
 * FAKE_CUDA_FAIL_LAUNCH=<n> makes the n-th cuLaunchKernel (from 1) and FAKE_CUDA_FAIL_SYNC=<n> the n-th
 * cuStreamSynchronize fail with CUDA_ERROR_ILLEGAL_ADDRESS (700), for the runtime's failure paths.
 *
 * Built by runtime_cpp/CMakeLists.txt as fake_cuda/libcuda.so.1 (tests only; never installed). C in a .cpp
 * file, so the runtime's build needs no C compiler. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { kMaxAllocations = 4096, kMaxFunctions = 4096 };

static struct {
  CUdeviceptr base;
  size_t size;
} g_allocations[kMaxAllocations];
static int g_num_allocations;
static char g_function_names[kMaxFunctions][128];
static int g_num_functions;
static FILE* g_trace;
static int g_trace_opened;
static char g_context; /* its address is the primary context */
static char g_module;  /* its address is every module */
static char g_stream;  /* its address is every stream */

/* Whether this is the call the environment variable `name` asks to fail (counting calls in *count). */
static int fails_now(const char* name, int* count) {
  const char* v = getenv(name);
  ++*count;
  return v && atoi(v) == *count;
}

static void trace(const char* format, ...) {
  if (!g_trace_opened) {
    const char* path = getenv("FAKE_CUDA_TRACE");
    g_trace = path ? fopen(path, "a") : NULL;
    g_trace_opened = 1;
  }
  if (!g_trace) return;
  va_list args;
  va_start(args, format);
  vfprintf(g_trace, format, args);
  va_end(args);
  fputc('\n', g_trace);
  fflush(g_trace);
}

/* "d<k>+<offset>" for a pointer into allocation k, else "host" (or "0"). */
static const char* name_of(CUdeviceptr p, char* out, size_t size) {
  if (p == 0) {
    snprintf(out, size, "0");
    return out;
  }
  for (int i = 0; i < g_num_allocations; ++i) {
    if (g_allocations[i].base && p >= g_allocations[i].base && p <= g_allocations[i].base + g_allocations[i].size) {
      snprintf(out, size, "d%d+%llu", i, p - g_allocations[i].base);
      return out;
    }
  }
  snprintf(out, size, "host");
  return out;
}

CUresult cuInit(unsigned int flags) {
  trace("cuInit(%u)", flags);
  return 0;
}
CUresult cuDriverGetVersion(int* v) {
  *v = 13020;
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
  *s = r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
  return 0;
}
CUresult cuGetErrorString(CUresult r, const char** s) {
  (void)r;
  *s = "fake driver error";
  return 0;
}
CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return 0;
}
CUresult cuDeviceGet(int* d, int ordinal) {
  trace("cuDeviceGet(%d)", ordinal);
  if (ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *d = 0;
  return 0;
}
CUresult cuDeviceGetName(char* name, int len, int d) {
  (void)d;
  snprintf(name, (size_t)len, "Fake GPU");
  return 0;
}
CUresult cuDeviceGetAttribute(int* v, int attribute, int d) {
  (void)d;
  switch (attribute) {
    case 5: *v = 2147483647; break;          /* max grid x */
    case 6: case 7: *v = 65535; break;       /* max grid y, z */
    case 75: *v = 9; break;                  /* compute capability major */
    case 76: *v = 0; break;                  /* minor */
    case 97: *v = 232448; break;             /* shared memory per block, opt-in */
    default: *v = 0; break;
  }
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) {
  trace("cuDevicePrimaryCtxRetain(%d)", d);
  *ctx = &g_context;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int d) {
  trace("cuDevicePrimaryCtxRelease(%d)", d);
  return 0;
}
CUresult cuCtxSetCurrent(void* ctx) {
  trace("cuCtxSetCurrent(%s)", ctx == &g_context ? "primary" : "other");
  return 0;
}
CUresult cuModuleLoadData(void** module, const void* image) {
  (void)image;
  trace("cuModuleLoadData");
  *module = &g_module;
  return 0;
}
CUresult cuModuleUnload(void* module) {
  (void)module;
  trace("cuModuleUnload");
  return 0;
}
CUresult cuModuleGetFunction(void** f, void* module, const char* name) {
  (void)module;
  if (g_num_functions == kMaxFunctions) return 2;
  snprintf(g_function_names[g_num_functions], sizeof(g_function_names[0]), "%s", name);
  *f = g_function_names[g_num_functions++];
  trace("cuModuleGetFunction(%s)", name);
  return 0;
}
CUresult cuFuncSetAttribute(void* f, int attribute, int value) {
  trace("cuFuncSetAttribute(%s, %d, %d)", (const char*)f, attribute, value);
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  if (g_num_allocations == kMaxAllocations) return 2;
  void* m = NULL;
  if (posix_memalign(&m, 256, bytes ? bytes : 1) != 0) return 2;
  memset(m, 0, bytes);
  g_allocations[g_num_allocations].base = (CUdeviceptr)(uintptr_t)m;
  g_allocations[g_num_allocations].size = bytes;
  *p = (CUdeviceptr)(uintptr_t)m;
  trace("cuMemAlloc(%zu) = d%d", bytes, g_num_allocations);
  ++g_num_allocations;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  char n[64];
  trace("cuMemFree(%s)", name_of(p, n, sizeof(n)));
  for (int i = 0; i < g_num_allocations; ++i) {
    if (g_allocations[i].base == p) {
      free((void*)(uintptr_t)p);
      g_allocations[i].base = 0;
      return 0;
    }
  }
  return 1;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  char n[64];
  trace("cuMemcpyHtoD(%s, %zu)", name_of(dst, n, sizeof(n)), bytes);
  memcpy((void*)(uintptr_t)dst, src, bytes);
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void* stream) {
  (void)stream;
  char n[64];
  trace("cuMemcpyHtoDAsync(%s, %zu)", name_of(dst, n, sizeof(n)), bytes);
  memcpy((void*)(uintptr_t)dst, src, bytes);
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, void* stream) {
  (void)stream;
  char n[64];
  trace("cuMemcpyDtoHAsync(%s, %zu)", name_of(src, n, sizeof(n)), bytes);
  memcpy(dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void* stream) {
  (void)stream;
  char a[64], b[64];
  trace("cuMemcpyDtoDAsync(%s, %s, %zu)", name_of(dst, a, sizeof(a)), name_of(src, b, sizeof(b)), bytes);
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, void* stream) {
  (void)stream;
  char n[64];
  trace("cuMemsetD8Async(%s, %u, %zu)", name_of(dst, n, sizeof(n)), value, bytes);
  memset((void*)(uintptr_t)dst, value, bytes);
  return 0;
}
CUresult cuStreamCreate(void** stream, unsigned int flags) {
  trace("cuStreamCreate(%u)", flags);
  *stream = &g_stream;
  return 0;
}
CUresult cuStreamDestroy_v2(void* stream) {
  (void)stream;
  trace("cuStreamDestroy");
  return 0;
}
CUresult cuStreamSynchronize(void* stream) {
  static int count;
  (void)stream;
  trace("cuStreamSynchronize");
  return fails_now("FAKE_CUDA_FAIL_SYNC", &count) ? 700 : 0;
}
/* Device memory for pointers into an allocation of this library, unknown (all attributes left) otherwise. */
CUresult cuPointerGetAttributes(unsigned int n, int* attributes, void** data, CUdeviceptr p) {
  char name[64];
  trace("cuPointerGetAttributes(%s)", name_of(p, name, sizeof(name)));
  int k = -1;
  for (int i = 0; i < g_num_allocations; ++i) {
    if (g_allocations[i].base && p >= g_allocations[i].base && p < g_allocations[i].base + g_allocations[i].size) k = i;
  }
  if (k < 0) return 0;
  for (unsigned int i = 0; i < n; ++i) {
    switch (attributes[i]) {
      case 1: *(void**)data[i] = &g_context; break;
      case 2: *(unsigned int*)data[i] = 2; break; /* CU_MEMORYTYPE_DEVICE */
      case 8: *(unsigned int*)data[i] = 0; break;
      case 9: *(int*)data[i] = 0; break;
      case 11: *(CUdeviceptr*)data[i] = g_allocations[k].base; break;
      case 12: *(size_t*)data[i] = g_allocations[k].size; break;
      default: break;
    }
  }
  return 0;
}
/* Records the launch (function, grid, block, shared memory and the first parameter, the buffer pointer every
 * step has); the kernel does nothing. */
CUresult cuLaunchKernel(void* f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, void* stream, void** params, void** extra) {
  (void)stream;
  (void)extra;
  char first[64];
  if (params) name_of(*(CUdeviceptr*)params[0], first, sizeof(first));
  static int count;
  trace("cuLaunchKernel(%s, grid %u %u %u, block %u %u %u, shared %u, first parameter %s)", (const char*)f, gx, gy, gz,
        bx, by, bz, shared, params ? first : "none");
  return fails_now("FAKE_CUDA_FAIL_LAUNCH", &count) ? 700 : 0;
}

}  /* extern "C" */
