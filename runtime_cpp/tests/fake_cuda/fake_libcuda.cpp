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
 * cuStreamSynchronize fail with CUDA_ERROR_ILLEGAL_ADDRESS (700), for the runtime's failure paths;
 * FAKE_CUDA_FAIL_CAPTURE=<n> makes the n-th cuStreamBeginCapture fail with CUDA_ERROR_NOT_SUPPORTED (801).
 * FAKE_CUDA_SET_FLAG=<n>:<i>:<v> makes the n-th launch that runs (not one captured into a graph) write the int32 v
 * where its parameter i points, as a kernel's failed check writes its error flag; several, comma-separated, set
 * several.
 *
 * A test that plays a caller with CUDA streams of its own (aotpack_session_enqueue) takes them from
 * fake_cuda_caller_stream(k), k < 8: calls queued on one of those are traced with " on caller stream k" at the
 * end; the runtime's own streams (cuStreamCreate) and the legacy default stream (0) are not named.
 *
 * Page-locked host memory (cuMemHostAlloc) is host memory too, written h<k>+<offset> in the trace. CUDA graphs are
 * recorded and replayed for real: between cuStreamBeginCapture and cuStreamEndCapture the stream's copies,
 * memsets and launches are traced with a "capture: " prefix and kept as the graph's nodes instead of running;
 * cuGraphLaunch runs the copies and memsets of its nodes (launches still do nothing) and traces one line.
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

enum { kMaxAllocations = 4096, kMaxFunctions = 4096, kMaxGraphs = 65536 };

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
static char g_caller_streams[8];
static struct {
  void* base;
  size_t size;
} g_pinned[kMaxAllocations];
static int g_num_pinned;

/* A graph's node: a copy or memset (run at replay) or a launch (which does nothing). */
typedef struct {
  int kind; /* 0 copy, 1 memset, 2 launch */
  void* dst;
  const void* src;
  size_t bytes;
  unsigned char value;
} Node;
typedef struct {
  Node* nodes;
  int num_nodes, capacity;
  int id;
} Graph;
static Graph* g_capturing; /* the graph the stream records into, or NULL */
static int g_capture_failed;
static int g_num_graphs, g_num_execs;

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
  for (int i = 0; i < g_num_pinned; ++i) {
    uintptr_t base = (uintptr_t)g_pinned[i].base;
    if (base && p >= base && p <= base + g_pinned[i].size) {
      snprintf(out, size, "h%d+%llu", i, p - base);
      return out;
    }
  }
  snprintf(out, size, "host");
  return out;
}

/* While the stream captures, a call is traced as "capture: ..." and becomes a node; 1 when it was recorded. */
static int record(int kind, void* dst, const void* src, size_t bytes, unsigned char value) {
  if (!g_capturing) return 0;
  Graph* g = g_capturing;
  if (g->num_nodes == g->capacity) {
    int capacity = g->capacity ? 2 * g->capacity : 64;
    Node* nodes = (Node*)realloc(g->nodes, sizeof(Node) * (size_t)capacity);
    if (!nodes) {
      g_capture_failed = 1;
      return 1;
    }
    g->nodes = nodes;
    g->capacity = capacity;
  }
  Node n = {kind, dst, src, bytes, value};
  g->nodes[g->num_nodes++] = n;
  return 1;
}
static const char* capture_prefix(void) { return g_capturing ? "capture: " : ""; }

void* fake_cuda_caller_stream(int k) { return k >= 0 && k < 8 ? &g_caller_streams[k] : NULL; }

/* " on caller stream k" for a stream of fake_cuda_caller_stream's, else "". */
static const char* stream_note(const void* stream) {
  static char notes[8][24];
  const char* p = (const char*)stream;
  if (p < g_caller_streams || p >= g_caller_streams + 8) return "";
  int k = (int)(p - g_caller_streams);
  snprintf(notes[k], sizeof(notes[k]), " on caller stream %d", k);
  return notes[k];
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
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  char n[64];
  trace("cuMemcpyDtoH(%s, %zu)", name_of(src, n, sizeof(n)), bytes);
  memcpy(dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void* stream) {
  (void)stream;
  char n[64];
  char h[64];
  trace("%scuMemcpyHtoDAsync(%s, %s, %zu)", capture_prefix(), name_of(dst, n, sizeof(n)),
        name_of((CUdeviceptr)(uintptr_t)src, h, sizeof(h)), bytes);
  if (!record(0, (void*)(uintptr_t)dst, src, bytes, 0)) memcpy((void*)(uintptr_t)dst, src, bytes);
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, void* stream) {
  (void)stream;
  char n[64];
  char h[64];
  trace("%scuMemcpyDtoHAsync(%s, %s, %zu)", capture_prefix(), name_of((CUdeviceptr)(uintptr_t)dst, h, sizeof(h)),
        name_of(src, n, sizeof(n)), bytes);
  if (!record(0, dst, (const void*)(uintptr_t)src, bytes, 0)) memcpy(dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void* stream) {
  char a[64], b[64];
  trace("%scuMemcpyDtoDAsync(%s, %s, %zu)%s", capture_prefix(), name_of(dst, a, sizeof(a)), name_of(src, b, sizeof(b)),
        bytes, stream_note(stream));
  if (!record(0, (void*)(uintptr_t)dst, (const void*)(uintptr_t)src, bytes, 0))
    memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, void* stream) {
  (void)stream;
  char n[64];
  trace("%scuMemsetD8Async(%s, %u, %zu)", capture_prefix(), name_of(dst, n, sizeof(n)), value, bytes);
  if (!record(1, (void*)(uintptr_t)dst, NULL, bytes, value)) memset((void*)(uintptr_t)dst, value, bytes);
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
  trace("cuStreamSynchronize%s", stream_note(stream));
  if (g_capturing) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
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
  if (k < 0) {
    for (int i = 0; i < g_num_pinned; ++i) {
      uintptr_t base = (uintptr_t)g_pinned[i].base;
      if (base && p >= base && p < base + g_pinned[i].size) {
        for (unsigned int j = 0; j < n; ++j) {
          if (attributes[j] == 2) *(unsigned int*)data[j] = 1; /* CU_MEMORYTYPE_HOST */
        }
      }
    }
    return 0;
  }
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
 * step has; with FAKE_CUDA_TRACE_PARAM=<i>, the i-th parameter (from 0) too, read as a device pointer: the
 * hidden global scratch pointer, say); the kernel does nothing. */
static CUresult launch(void* f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                       unsigned int bz, unsigned int shared, void** params, const char* how, const void* stream) {
  char first[64];
  char extra[96] = "";
  if (params) name_of(*(CUdeviceptr*)params[0], first, sizeof(first));
  const char* traced = getenv("FAKE_CUDA_TRACE_PARAM");
  if (params && traced) {
    char value[64];
    int i = atoi(traced);
    name_of(*(CUdeviceptr*)params[i], value, sizeof(value));
    snprintf(extra, sizeof(extra), ", parameter %d %s", i, value);
  }
  static int count;
  trace("%scuLaunchKernel(%s, grid %u %u %u, block %u %u %u, shared %u, first parameter %s%s)%s%s", capture_prefix(),
        (const char*)f, gx, gy, gz, bx, by, bz, shared, params ? first : "none", extra, how, stream_note(stream));
  if (fails_now("FAKE_CUDA_FAIL_LAUNCH", &count)) {
    if (g_capturing) g_capture_failed = 1;
    return 700;
  }
  static int runs;
  const char* set_flag = getenv("FAKE_CUDA_SET_FLAG");
  if (params && set_flag && !g_capturing) {
    ++runs;
    int at = 0, index = 0, value = 0, used = 0;
    for (const char* p = set_flag; sscanf(p, "%d:%d:%d%n", &at, &index, &value, &used) == 3; p += used) {
      if (at == runs) *(int32_t*)(uintptr_t) * (CUdeviceptr*)params[index] = value;
      if (p[used] != ',') break;
      ++used;
    }
  }
  record(2, NULL, NULL, 0, 0);
  return 0;
}
CUresult cuLaunchKernel(void* f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, void* stream, void** params, void** extra) {
  (void)extra;
  return launch(f, gx, gy, gz, bx, by, bz, shared, params, "", stream);
}

/* cuda.h's CUlaunchConfig and CUlaunchAttribute (CUDA 12.0+). A launch through cuLaunchKernelEx is traced as
 * cuLaunchKernel's, followed by " programmatic" when it allows programmatic stream serialization (attribute 6),
 * so traces compare the same steps either way. */
typedef struct {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int value;
  } value;
} FakeLaunchAttribute;
typedef struct {
  unsigned int gx, gy, gz, bx, by, bz, shared;
  void* stream;
  FakeLaunchAttribute* attrs;
  unsigned int num_attrs;
} FakeLaunchConfig;
CUresult cuLaunchKernelEx(const FakeLaunchConfig* c, void* f, void** params, void** extra) {
  (void)extra;
  int programmatic = 0;
  for (unsigned int i = 0; i < c->num_attrs; ++i) {
    if (c->attrs[i].id == 6) programmatic = c->attrs[i].value.value != 0;
    else return 1; /* CUDA_ERROR_INVALID_VALUE: an attribute this fake does not know */
  }
  return launch(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shared, params, programmatic ? " programmatic" : "", c->stream);
}

CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int flags) {
  if (g_num_pinned == kMaxAllocations) return 2;
  void* m = NULL;
  if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0) return 2;
  memset(m, 0, bytes);
  g_pinned[g_num_pinned].base = m;
  g_pinned[g_num_pinned].size = bytes;
  *p = m;
  trace("cuMemHostAlloc(%zu, %u) = h%d", bytes, flags, g_num_pinned);
  ++g_num_pinned;
  return 0;
}
CUresult cuMemFreeHost(void* p) {
  char n[64];
  trace("cuMemFreeHost(%s)", name_of((CUdeviceptr)(uintptr_t)p, n, sizeof(n)));
  for (int i = 0; i < g_num_pinned; ++i) {
    if (g_pinned[i].base == p) {
      free(p);
      g_pinned[i].base = NULL;
      return 0;
    }
  }
  return 1;
}

/* Page-locked memory is mapped at the same address on the device (unified addressing, as on 64-bit Linux). */
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned int flags) {
  char n[64];
  trace("cuMemHostGetDevicePointer(%s, %u)", name_of((CUdeviceptr)(uintptr_t)p, n, sizeof(n)), flags);
  for (int i = 0; i < g_num_pinned; ++i) {
    if (g_pinned[i].base == p) {
      *d = (CUdeviceptr)(uintptr_t)p;
      return 0;
    }
  }
  return 1; /* CUDA_ERROR_INVALID_VALUE: not page-locked memory this fake allocated */
}

/* Copies run when they are queued, so an event is complete once recorded. */
enum { kMaxEvents = 64 };
static char g_events[kMaxEvents]; /* their addresses are the events (ev0, ev1, ...) */
static char g_event_in_use[kMaxEvents];
static int event_number(const void* event) {
  int k = (int)((const char*)event - g_events);
  return k >= 0 && k < kMaxEvents && g_event_in_use[k] ? k : -1;
}
CUresult cuEventCreate(void** event, unsigned int flags) {
  int k = 0;
  while (k < kMaxEvents && g_event_in_use[k]) ++k;
  if (k == kMaxEvents) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  g_event_in_use[k] = 1;
  *event = &g_events[k];
  trace("cuEventCreate(%u) = ev%d", flags, k);
  return 0;
}
CUresult cuEventRecord(void* event, void* stream) {
  trace("cuEventRecord(ev%d)%s", event_number(event), stream_note(stream));
  return event_number(event) < 0 ? 400 : 0; /* CUDA_ERROR_INVALID_HANDLE */
}
CUresult cuEventSynchronize(void* event) {
  trace("cuEventSynchronize(ev%d)", event_number(event));
  return event_number(event) < 0 ? 400 : 0;
}
CUresult cuEventDestroy_v2(void* event) {
  int k = event_number(event);
  trace("cuEventDestroy(ev%d)", k);
  if (k < 0) return 400;
  g_event_in_use[k] = 0;
  return 0;
}
CUresult cuStreamWaitEvent(void* stream, void* event, unsigned int flags) {
  trace("cuStreamWaitEvent(ev%d, %u)%s", event_number(event), flags, stream_note(stream));
  return event_number(event) < 0 ? 400 : 0;
}

CUresult cuStreamBeginCapture_v2(void* stream, int mode) {
  static int count;
  (void)stream;
  trace("cuStreamBeginCapture(mode %d)", mode);
  if (fails_now("FAKE_CUDA_FAIL_CAPTURE", &count)) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
  if (g_capturing) return 1;
  if (g_num_graphs == kMaxGraphs) return 2;
  g_capturing = (Graph*)calloc(1, sizeof(Graph));
  if (!g_capturing) return 2;
  g_capturing->id = g_num_graphs++;
  g_capture_failed = 0;
  return 0;
}
CUresult cuStreamEndCapture(void* stream, void** graph) {
  (void)stream;
  Graph* g = g_capturing;
  g_capturing = NULL;
  if (!g) {
    trace("cuStreamEndCapture: not capturing");
    return 1;
  }
  trace("cuStreamEndCapture = g%d (%d nodes)", g->id, g->num_nodes);
  if (g_capture_failed) {
    free(g->nodes);
    free(g);
    *graph = NULL;
    return 901; /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */
  }
  *graph = g;
  return 0;
}
/* The executable graph is a copy of the graph's nodes, numbered e<k>. */
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long flags) {
  Graph* g = (Graph*)graph;
  Graph* e = (Graph*)calloc(1, sizeof(Graph));
  if (!e) return 2;
  e->nodes = (Node*)malloc(sizeof(Node) * (size_t)(g->num_nodes ? g->num_nodes : 1));
  if (!e->nodes) {
    free(e);
    return 2;
  }
  memcpy(e->nodes, g->nodes, sizeof(Node) * (size_t)g->num_nodes);
  e->num_nodes = e->capacity = g->num_nodes;
  e->id = g_num_execs++;
  trace("cuGraphInstantiateWithFlags(g%d, %llu) = e%d", g->id, flags, e->id);
  *exec = e;
  return 0;
}
CUresult cuGraphDestroy(void* graph) {
  Graph* g = (Graph*)graph;
  trace("cuGraphDestroy(g%d)", g->id);
  free(g->nodes);
  free(g);
  return 0;
}
CUresult cuGraphExecDestroy(void* exec) {
  Graph* e = (Graph*)exec;
  trace("cuGraphExecDestroy(e%d)", e->id);
  free(e->nodes);
  free(e);
  return 0;
}
CUresult cuGraphLaunch(void* exec, void* stream) {
  Graph* e = (Graph*)exec;
  trace("cuGraphLaunch(e%d, %d nodes)%s", e->id, e->num_nodes, stream_note(stream));
  for (int i = 0; i < e->num_nodes; ++i) {
    Node* n = &e->nodes[i];
    if (n->kind == 0) memmove(n->dst, n->src, n->bytes);
    if (n->kind == 1) memset(n->dst, n->value, n->bytes);
  }
  return 0;
}

}  /* extern "C" */
