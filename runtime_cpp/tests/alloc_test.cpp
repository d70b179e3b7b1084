// aotpack-alloc-test: checks the runtime's promise that a run allocates nothing, on any backend.
//
//   aotpack-alloc-test PACKAGE [--device cpu|cuda] [--io host|device] [--threads N] [--rounds N] [--no-cuda-graphs]
//
// Replaces the global operator new (every form) and, on glibc without a sanitizer, malloc and its kin with
// counting versions, so that every allocation in the process is seen: the runtime's, the kernels' and the
// pool threads'. Creates a session, runs it once at the symbols' maxima, the minima and an inner point (the
// warm-up: the first run may bind lazily loaded code, and on CUDA a shape's first run records its CUDA graph,
// which the driver allocates), then counts the allocations of --rounds rounds of runs at the minima, an inner
// point and the maxima, each followed by aotpack_session_output for every output. Inputs are zeros.
// --no-cuda-graphs creates the session with graphs off.
//
// Exit status 0 when the counted runs allocated nothing, 1 when they allocated or a run failed, 2 for a
// usage error or a package whose inputs it cannot make (a dimension that is an expression). On CUDA only
// C++ allocations fail the test: C allocations there include the NVIDIA driver's own, which are reported.
//
// Run by tests/runtime/test_runtime_allocations.py (CPU) and tests/gpu/test_gpu_allocations.py (CUDA).
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "aotpack.h"
#include "backends/cuda/cuda_driver.hpp"

// ---- counting allocators -------------------------------------------------------------------------------

namespace {

std::atomic<long> g_cpp_allocations{0};  // operator new
std::atomic<long> g_c_allocations{0};    // malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign

}  // namespace

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define AOTPACK_COUNT_C_ALLOCATIONS 1
// glibc's own allocator under its internal names, so the replacements below can forward to it.
extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void __libc_free(void* p);
void* __libc_memalign(size_t alignment, size_t size);

void* malloc(size_t size) noexcept {
  g_c_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) noexcept {
  g_c_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) noexcept {
  g_c_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, size);
}
void free(void* p) noexcept { __libc_free(p); }
void* aligned_alloc(size_t alignment, size_t size) noexcept {
  g_c_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, size);
}
void* memalign(size_t alignment, size_t size) noexcept {
  g_c_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  g_c_allocations.fetch_add(1, std::memory_order_relaxed);
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
static void* raw_malloc(size_t size) { return __libc_malloc(size); }
static void* raw_memalign(size_t alignment, size_t size) { return __libc_memalign(alignment, size); }
#else
// A sanitizer (or another libc) keeps its own malloc: only C++ allocations are counted.
static void* raw_malloc(size_t size) { return std::malloc(size); }
static void* raw_memalign(size_t alignment, size_t size) {
  void* p = nullptr;
  return posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
}
#endif

static void* counted_new(size_t size) {
  g_cpp_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = raw_malloc(size ? size : 1);
  if (!p) throw std::bad_alloc();
  return p;
}

static void* counted_new_aligned(size_t size, std::align_val_t alignment) {
  g_cpp_allocations.fetch_add(1, std::memory_order_relaxed);
  size_t a = static_cast<size_t>(alignment) < sizeof(void*) ? sizeof(void*) : static_cast<size_t>(alignment);
  void* p = raw_memalign(a, size ? size : 1);
  if (!p) throw std::bad_alloc();
  return p;
}

void* operator new(size_t size) { return counted_new(size); }
void* operator new[](size_t size) { return counted_new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_new(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_new(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(size_t size, std::align_val_t a) { return counted_new_aligned(size, a); }
void* operator new[](size_t size, std::align_val_t a) { return counted_new_aligned(size, a); }
void* operator new(size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_new_aligned(size, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_new_aligned(size, a);
  } catch (...) {
    return nullptr;
  }
}
// Every block above comes from malloc or memalign, so every delete is free.
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

// ---- the test ------------------------------------------------------------------------------------------

namespace {

struct Args {
  const char* package = nullptr;
  bool cuda = false;
  bool device_io = false;
  int threads = 1;
  int rounds = 5;
  bool cuda_graphs = true;
};

int usage(const char* message) {
  std::fprintf(stderr, "aotpack-alloc-test: %s\nusage: aotpack-alloc-test PACKAGE [--device cpu|cuda] "
               "[--io host|device] [--threads N] [--rounds N] [--no-cuda-graphs]\n", message);
  return 2;
}

bool failed(aotpack_status_t status, const char* what) {
  if (!status) return false;
  std::fprintf(stderr, "aotpack-alloc-test: %s: %s\n", what, aotpack_status_message(status));
  aotpack_status_free(status);
  return true;
}

// One point of the symbols' ranges: every input's shape there.
struct Point {
  const char* name;
  std::vector<std::vector<int64_t>> shapes;  // per input
  std::vector<aotpack_tensor_t> tensors;     // per input, pointing into shapes and the input memory
};

// Memory for the inputs at their largest, zeroed: host memory, or device memory in the primary context.
class InputMemory {
 public:
  ~InputMemory() {
    for (void* p : host_) std::free(p);
    if (driver_) {
      for (aotpack::cuda::CUdeviceptr p : device_) driver_->cuMemFree(p);
      driver_->cuDevicePrimaryCtxRelease(device_index_);
    }
  }

  bool init_device() {
    using namespace aotpack::cuda;
    const Driver* d = nullptr;
    aotpack::Status st = driver(&d);
    if (!st.ok()) return report(st.message().c_str());
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (d->cuDeviceGet(&device, 0) != CUDA_SUCCESS) return report("cuDeviceGet failed");
    if (d->cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS) return report("cuDevicePrimaryCtxRetain failed");
    driver_ = d;  // from here on the destructor releases the context
    device_index_ = device;
    if (driver_->cuCtxSetCurrent(context) != CUDA_SUCCESS) return report("cuCtxSetCurrent failed");
    return true;
  }

  // Zeroed memory of `bytes` bytes (at least 256), host or device.
  void* allocate(size_t bytes) {
    bytes = bytes < 256 ? 256 : bytes;
    if (!driver_) {
      void* p = std::calloc(1, bytes);
      if (p) host_.push_back(p);
      return p;
    }
    aotpack::cuda::CUdeviceptr p = 0;
    if (driver_->cuMemAlloc(&p, bytes) != aotpack::cuda::CUDA_SUCCESS) return nullptr;
    device_.push_back(p);
    std::vector<uint8_t> zeros(bytes, 0);
    if (driver_->cuMemcpyHtoD(p, zeros.data(), bytes) != aotpack::cuda::CUDA_SUCCESS) return nullptr;
    return reinterpret_cast<void*>(p);
  }

 private:
  static bool report(const char* message) {
    std::fprintf(stderr, "aotpack-alloc-test: device inputs: %s\n", message);
    return false;
  }

  const aotpack::cuda::Driver* driver_ = nullptr;
  int device_index_ = 0;
  std::vector<void*> host_;
  std::vector<aotpack::cuda::CUdeviceptr> device_;
};

int parse_args(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--device") {
      const char* v = value();
      if (!v || (std::strcmp(v, "cpu") != 0 && std::strcmp(v, "cuda") != 0)) return usage("--device is cpu or cuda");
      args->cuda = std::strcmp(v, "cuda") == 0;
    } else if (a == "--io") {
      const char* v = value();
      if (!v || (std::strcmp(v, "host") != 0 && std::strcmp(v, "device") != 0)) return usage("--io is host or device");
      args->device_io = std::strcmp(v, "device") == 0;
    } else if (a == "--no-cuda-graphs") {
      args->cuda_graphs = false;
    } else if (a == "--threads" || a == "--rounds") {
      const char* v = value();
      int n = v ? std::atoi(v) : 0;
      if (n < 1 || n > 1024) return usage("--threads and --rounds take 1..1024");
      (a == "--threads" ? args->threads : args->rounds) = n;
    } else if (!args->package && a.rfind("--", 0) != 0) {
      args->package = argv[i];
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (!args->package) return usage("no package");
  if (args->device_io && !args->cuda) return usage("--io device needs --device cuda");
  return 0;
}

int run_test(const Args& args) {
  aotpack_model_t* model = nullptr;
  if (failed(aotpack_model_load(args.package, nullptr, &model), "loading the package")) return 1;
  aotpack_session_options_t options;
  aotpack_session_options_init(&options);
  options.device_type = args.cuda ? AOTPACK_DEVICE_CUDA : AOTPACK_DEVICE_CPU;
  options.num_threads = args.threads;
  options.io_memory = args.device_io ? AOTPACK_MEMORY_DEVICE : AOTPACK_MEMORY_HOST;
  options.cuda_graphs = args.cuda_graphs ? 1 : 0;
  aotpack_session_t* session = nullptr;
  if (failed(aotpack_session_create(model, &options, &session), "creating the session")) {
    aotpack_model_release(model);
    return 1;
  }

  // The points: minima, an inner point, maxima; the warm-up runs at the maxima.
  const size_t num_inputs = aotpack_model_num_inputs(model);
  const size_t num_outputs = aotpack_model_num_outputs(model);
  const char* names[] = {"maxima", "minima", "inner point"};
  std::vector<Point> points(3);
  InputMemory memory;
  if (args.device_io && !memory.init_device()) return 1;
  std::vector<void*> data(num_inputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    aotpack_tensor_info_t info;
    if (failed(aotpack_model_input_info(model, i, &info), "input info")) return 1;
    uint64_t bytes = aotpack_dtype_size(info.dtype);
    for (size_t p = 0; p < points.size(); ++p) {
      points[p].name = names[p];
      std::vector<int64_t> shape(info.rank);
      for (int32_t d = 0; d < info.rank; ++d) {
        const aotpack_dim_info_t& dim = info.dims[d];
        if (dim.size < 0 && !dim.symbol) {
          std::fprintf(stderr, "aotpack-alloc-test: input \"%s\" dim %d is an expression; give a package whose "
                       "input dims are constants or symbols\n", info.name, d);
          return 2;
        }
        const int64_t lo = dim.min, hi = dim.max;  // both the size when fixed
        shape[d] = p == 0 ? hi : p == 1 ? lo : lo + (hi - lo) / 2;
      }
      points[p].shapes.push_back(shape);
    }
    for (int64_t v : points[0].shapes[i]) bytes *= static_cast<uint64_t>(v);
    data[i] = memory.allocate(bytes);
    if (!data[i]) {
      std::fprintf(stderr, "aotpack-alloc-test: cannot allocate %llu bytes for input \"%s\"\n",
                   static_cast<unsigned long long>(bytes), info.name);
      return 1;
    }
  }
  for (Point& p : points) {
    for (size_t i = 0; i < num_inputs; ++i) {
      aotpack_tensor_info_t info;
      if (failed(aotpack_model_input_info(model, i, &info), "input info")) return 1;
      aotpack_tensor_t t;
      t.dtype = info.dtype;
      t.rank = info.rank;
      t.shape = p.shapes[i].data();
      t.data = data[i];
      p.tensors.push_back(t);
    }
  }

  auto run_once = [&](Point& p) -> bool {
    if (failed(aotpack_session_run(session, p.tensors.data(), num_inputs), p.name)) return false;
    for (size_t o = 0; o < num_outputs; ++o) {
      aotpack_tensor_t out;
      if (failed(aotpack_session_output(session, o, &out), "reading an output")) return false;
    }
    return true;
  };
  for (Point& p : points) {
    if (!run_once(p)) return 1;
  }

  const long cpp_before = g_cpp_allocations.load(), c_before = g_c_allocations.load();
  int runs = 0;
  for (int r = 0; r < args.rounds; ++r) {
    for (Point& p : points) {
      if (!run_once(p)) return 1;
      ++runs;
    }
  }
  const long cpp = g_cpp_allocations.load() - cpp_before, c = g_c_allocations.load() - c_before;

  aotpack_session_destroy(session);
  aotpack_model_release(model);
#ifdef AOTPACK_COUNT_C_ALLOCATIONS
  const bool counts_c = true;
#else
  const bool counts_c = false;
#endif
  // The driver's own C allocations are not the runtime's: on CUDA they are reported, not failed.
  const bool c_fails = counts_c && !args.cuda;
  std::printf("%s%s, %d runs after the warm-up: %ld C++ allocations, ", args.cuda ? "cuda" : "cpu",
              args.cuda ? (args.device_io ? " (device I/O)" : " (host I/O)") : "", runs, cpp);
  if (counts_c)
    std::printf("%ld C allocations%s\n", c, args.cuda ? " (the driver's included; not failed)" : "");
  else
    std::printf("C allocations not counted (sanitizer build)\n");
  if (cpp != 0 || (c_fails && c != 0)) {
    std::printf("FAILED: a run allocated\n");
    return 1;
  }
  std::printf("no allocation in a run\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  int rc = parse_args(argc, argv, &args);
  if (rc != 0) return rc;
  return run_test(args);
}
