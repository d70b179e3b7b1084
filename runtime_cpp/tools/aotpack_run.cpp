// aotpack-run: loads a package and runs it once (then --repeat more times for timing) through the C API.
//
//   aotpack-run PACKAGE [--inputs in.safetensors] [--outputs out.safetensors] [--device cpu] [--threads N]
//                       [--no-verify] [--repeat N] [--seed N] [--sym NAME=VALUE ...]
//                       [--no-cuda-graphs] [--no-cuda-pdl] [--io host|device] [--queue N] [--timings]
//                       [--public-key PUB.pem [--signature SIG]]
//
// Exit codes: 0 success, 1 a runtime error (bad package, bad inputs, failed run), 2 a usage error. Every
// failure is one line on stderr.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "aotpack.hpp"
#include "dl_symbol.hpp"
#include "dtype.hpp"
#include "safetensors.hpp"

namespace {

const char kUsage[] =
    "usage: aotpack-run PACKAGE [--inputs in.safetensors] [--outputs out.safetensors] [--device cpu|cuda[:N]]\n"
    "                   [--threads N] [--no-verify] [--repeat N] [--seed N] [--sym NAME=VALUE ...]\n"
    "                   [--no-cuda-graphs] [--no-cuda-pdl] [--io host|device] [--queue N] [--timings]\n"
    "                   [--public-key PUB.pem [--signature SIG]]\n"
    "\n"
    "Runs an aotpack package. Inputs come from a safetensors file keyed by input name, or are random\n"
    "(floats uniform in [-1, 1), integers in [0, 2)) with each symbol at --sym's value or its maximum.\n"
    "On CUDA, runs replay a CUDA graph per shape unless --no-cuda-graphs: the first run records it (capture)\n"
    "and the --repeat runs replay it, timed separately.\n"
    "On an sm_90+ GPU, the kernels an sm_90+ package marks \"pdl\" are launched with programmatic dependent\n"
    "launch (each may start while its predecessor finishes) unless --no-cuda-pdl, which launches every kernel\n"
    "with cuLaunchKernel. The outputs are the same either way.\n"
    "--io device (CUDA only) gives the session its inputs in device memory, copied there once before the first\n"
    "run, and reads its outputs back after the last: the timed runs move no data over the bus, as in a service\n"
    "that keeps its tensors on the GPU (the default, host, copies both ways every run).\n"
    "--queue N (with --io device) then queues N runs back to back on the default stream without waiting\n"
    "(aotpack_session_enqueue) and waits once: a run's share of that time is what a service that keeps the\n"
    "GPU fed pays, with the host's work for the next run hidden behind the kernels of this one.\n"
    "--timings prints where the time from start to the first result goes (AOTPACK_TIMINGS=1 does the same).\n"
    "--public-key requires the package to be signed by that key (`aotpack sign`); the signature is read\n"
    "from --signature, default PACKAGE.sig.\n";

// A usage error (exit 2); runtime errors are aotpack::Error or RunError (exit 1).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string package;
  std::string inputs, outputs;
  std::string device = "cpu";
  int device_index = 0;
  int threads = 1;
  bool verify = true;
  int repeat = 5;
  int queue = 0;  // --queue: runs queued back to back after the timed ones
  bool cuda_graphs = true;
  bool cuda_pdl = true;
  bool device_io = false;
  bool timings = false;
  uint64_t seed = 0;
  std::map<std::string, int64_t> symbols;
  std::string public_key, signature;
};

int64_t parse_int(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) throw UsageError(flag + " expects an integer, got \"" + text + "\"");
  return v;
}

Args parse_args(int argc, char** argv) {
  Args args;
  std::vector<std::string> rest(argv + 1, argv + argc);
  for (size_t i = 0; i < rest.size(); ++i) {
    std::string a = rest[i];
    std::string value;
    bool has_inline_value = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos && a.rfind("--sym", 0) != 0) {
      value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      has_inline_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_inline_value) return value;
      if (i + 1 >= rest.size()) throw UsageError(a + " expects a value");
      return rest[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--inputs") {
      args.inputs = next();
    } else if (a == "--outputs") {
      args.outputs = next();
    } else if (a == "--device") {
      args.device = next();
      if (args.device.rfind("cuda:", 0) == 0) {  // cuda:N
        int64_t n = parse_int("--device cuda:N", args.device.substr(5));
        if (n < 0 || n > 1024) throw UsageError("--device cuda:N: N must be 0..1024");
        args.device_index = static_cast<int>(n);
        args.device = "cuda";
      }
      if (args.device != "cpu" && args.device != "cuda")
        throw UsageError("--device is \"" + args.device + "\"; expected cpu, cuda or cuda:N");
    } else if (a == "--threads") {
      int64_t n = parse_int("--threads", next());
      if (n < 1 || n > 1024) throw UsageError("--threads must be 1..1024");
      args.threads = static_cast<int>(n);
    } else if (a == "--public-key") {
      args.public_key = next();
      if (args.public_key.empty()) throw UsageError("--public-key expects a file");
    } else if (a == "--signature") {
      args.signature = next();
      if (args.signature.empty()) throw UsageError("--signature expects a file");
    } else if (a == "--no-verify") {
      args.verify = false;
    } else if (a == "--no-cuda-graphs") {
      args.cuda_graphs = false;
    } else if (a == "--no-cuda-pdl") {
      args.cuda_pdl = false;
    } else if (a == "--timings") {
      args.timings = true;
    } else if (a == "--io") {
      std::string io = next();
      if (io != "host" && io != "device") throw UsageError("--io is \"" + io + "\"; expected host or device");
      args.device_io = io == "device";
    } else if (a == "--repeat") {
      int64_t n = parse_int("--repeat", next());
      if (n < 0 || n > 1000000) throw UsageError("--repeat must be 0..1000000");
      args.repeat = static_cast<int>(n);
    } else if (a == "--queue") {
      int64_t n = parse_int("--queue", next());
      if (n < 1 || n > 1000000) throw UsageError("--queue must be 1..1000000");
      args.queue = static_cast<int>(n);
    } else if (a == "--seed") {
      args.seed = static_cast<uint64_t>(parse_int("--seed", next()));
    } else if (a == "--sym" || a.rfind("--sym=", 0) == 0) {
      // --sym A=1 B=2, --sym A=1 --sym B=2 and --sym=A=1 all work.
      std::vector<std::string> items;
      if (a != "--sym") items.push_back(a.substr(6));
      else items.push_back(next());
      while (i + 1 < rest.size() && rest[i + 1].rfind("--", 0) != 0 && rest[i + 1].find('=') != std::string::npos)
        items.push_back(rest[++i]);
      for (const std::string& item : items) {
        size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) throw UsageError("--sym expects NAME=VALUE, got \"" + item + "\"");
        args.symbols[item.substr(0, eq)] = parse_int("--sym " + item.substr(0, eq), item.substr(eq + 1));
      }
    } else if (a.rfind("-", 0) == 0) {
      throw UsageError("unknown option " + a);
    } else if (args.package.empty()) {
      args.package = a;
    } else {
      throw UsageError("unexpected argument \"" + a + "\" (one PACKAGE only)");
    }
  }
  if (args.package.empty()) throw UsageError("missing PACKAGE");
  if (!args.signature.empty() && args.public_key.empty())
    throw UsageError("--signature needs --public-key, the key it is checked against");
  if (!args.inputs.empty() && !args.symbols.empty())
    throw UsageError("--sym sets the sizes of generated inputs; it cannot be used with --inputs");
  if (args.device_io && args.device != "cuda") throw UsageError("--io device needs --device cuda");
  if (args.queue > 0 && !args.device_io)
    throw UsageError("--queue queues runs on a CUDA stream, which needs --device cuda --io device");
  return args;
}

// ---- element conversions (for random inputs and printing) ------------------------------------------------

uint32_t float_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float bits_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_half(float f) {  // round to nearest even; values here are small and finite
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t{h & 0x8000u} << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    exp = 127 - 15 + 1;
    while (!(mant & 0x400)) {
      mant <<= 1;
      --exp;
    }
    return bits_float(sign | (exp << 23) | ((mant & 0x3ff) << 13));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000 | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

float bf16_to_float(uint16_t h) { return bits_float(uint32_t{h} << 16); }

double element(const void* data, aotpack_dtype_t dtype, size_t i) {
  switch (dtype) {
    case AOTPACK_DTYPE_FLOAT32: return static_cast<const float*>(data)[i];
    case AOTPACK_DTYPE_FLOAT64: return static_cast<const double*>(data)[i];
    case AOTPACK_DTYPE_FLOAT16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case AOTPACK_DTYPE_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case AOTPACK_DTYPE_INT64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case AOTPACK_DTYPE_INT32: return static_cast<const int32_t*>(data)[i];
    case AOTPACK_DTYPE_INT16: return static_cast<const int16_t*>(data)[i];
    case AOTPACK_DTYPE_INT8: return static_cast<const int8_t*>(data)[i];
    case AOTPACK_DTYPE_UINT8: return static_cast<const uint8_t*>(data)[i];
    case AOTPACK_DTYPE_BOOL: return static_cast<const uint8_t*>(data)[i] ? 1 : 0;
  }
  return 0;
}

// ---- inputs ----------------------------------------------------------------------------------------------

// One input tensor owned by the tool, 64-byte aligned.
struct OwnedTensor {
  aotpack_dtype_t dtype = AOTPACK_DTYPE_FLOAT32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;  // 8-byte elements: enough alignment for every dtype
  size_t bytes = 0;

  void allocate(size_t n) {
    bytes = n;
    storage.assign((n + 7) / 8 + 1, 0);
  }
  void* data() { return storage.data(); }
  aotpack_tensor_t view() {
    return aotpack_tensor_t{dtype, static_cast<int32_t>(shape.size()), shape.data(), storage.data()};
  }
};

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

std::vector<OwnedTensor> read_inputs(const std::string& path, const std::vector<aotpack_tensor_info_t>& infos) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw RunError("cannot read the inputs file " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<aotpack::safetensors::TensorView> tensors;
  aotpack::Status st = aotpack::safetensors::parse(bytes.data(), bytes.size(), &tensors);
  if (!st.ok()) throw RunError("inputs file " + path + ": " + st.message());
  std::vector<std::string> names;
  for (const auto& info : infos) names.emplace_back(info.name);
  std::vector<OwnedTensor> out;
  for (const auto& info : infos) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.name == info.name; });
    if (it == tensors.end())
      throw RunError("inputs file " + path + " has no tensor \"" + info.name + "\" (the model's inputs are: " +
                     join_names(names) + ")");
    OwnedTensor t;
    t.dtype = it->dtype;
    t.shape = it->shape;
    t.allocate(it->size);
    if (it->size) std::memcpy(t.data(), it->data, it->size);
    out.push_back(std::move(t));
  }
  std::vector<std::string> extra;
  for (const auto& t : tensors) {
    if (std::find(names.begin(), names.end(), t.name) == names.end()) extra.push_back("\"" + t.name + "\"");
  }
  if (!extra.empty())
    throw RunError("inputs file " + path + " has tensors the model does not take: " + join_names(extra) +
                   " (the model's inputs are: " + join_names(names) + ")");
  return out;
}

std::vector<OwnedTensor> random_inputs(const std::vector<aotpack_tensor_info_t>& infos,
                                       const std::map<std::string, int64_t>& given, uint64_t seed) {
  std::map<std::string, int64_t> symbols;
  std::map<std::string, std::string> where;  // the first input dim of each symbol, as the runtime names it
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;
  for (const auto& info : infos) {
    for (int d = 0; d < info.rank; ++d) {
      const aotpack_dim_info_t& dim = info.dims[d];
      if (!dim.symbol || symbols.count(dim.symbol)) continue;
      symbols[dim.symbol] = dim.max;
      ranges[dim.symbol] = {dim.min, dim.max};
      where[dim.symbol] = "input \"" + std::string(info.name) + "\" dim " + std::to_string(d);
    }
  }
  for (const auto& [name, value] : given) {
    if (!symbols.count(name)) {
      std::vector<std::string> known;
      for (const auto& s : symbols) known.push_back(s.first);
      throw UsageError("--sym " + name + ": the model has no symbol \"" + name + "\" (its symbols: " +
                       (known.empty() ? std::string("none") : join_names(known)) + ")");
    }
    // Checked here, before any input is allocated: a value far outside the range would otherwise be
    // allocated and filled (or fail as "out of memory") before the runtime refused it.
    const auto [min, max] = ranges[name];
    if (value < min || value > max)
      throw RunError("--sym " + name + "=" + std::to_string(value) + ": " + where[name] + " (" + name + ") = " +
                     std::to_string(value) + " is outside the declared range " + std::to_string(min) + ".." +
                     std::to_string(max));
    symbols[name] = value;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<OwnedTensor> out;
  for (const auto& info : infos) {
    OwnedTensor t;
    t.dtype = info.dtype;
    size_t count = 1, bytes = 0;
    for (int d = 0; d < info.rank; ++d) {
      int64_t size = info.dims[d].symbol ? symbols[info.dims[d].symbol] : info.dims[d].size;
      t.shape.push_back(size);
      if (size < 0) throw UsageError(std::string("a negative size for input \"") + info.name + "\"");
      if (__builtin_mul_overflow(count, static_cast<size_t>(size), &count))
        throw RunError(std::string("input \"") + info.name + "\" would have more elements than fit in memory");
    }
    if (__builtin_mul_overflow(count, aotpack_dtype_size(t.dtype), &bytes))
      throw RunError(std::string("input \"") + info.name + "\" would be larger than fits in memory");
    try {
      t.allocate(bytes);
    } catch (const std::bad_alloc&) {
      throw RunError("out of memory allocating " + std::to_string(bytes) + " bytes for the random input \"" +
                     info.name + "\"");
    }
    for (size_t i = 0; i < count; ++i) {
      float f = uniform(rng);
      int64_t bit = static_cast<int64_t>(rng() & 1);
      switch (t.dtype) {
        case AOTPACK_DTYPE_FLOAT32: static_cast<float*>(t.data())[i] = f; break;
        case AOTPACK_DTYPE_FLOAT64: static_cast<double*>(t.data())[i] = f; break;
        case AOTPACK_DTYPE_FLOAT16: static_cast<uint16_t*>(t.data())[i] = float_to_half(f); break;
        case AOTPACK_DTYPE_BFLOAT16: static_cast<uint16_t*>(t.data())[i] = float_to_bf16(f); break;
        case AOTPACK_DTYPE_INT64: static_cast<int64_t*>(t.data())[i] = bit; break;
        case AOTPACK_DTYPE_INT32: static_cast<int32_t*>(t.data())[i] = static_cast<int32_t>(bit); break;
        case AOTPACK_DTYPE_INT16: static_cast<int16_t*>(t.data())[i] = static_cast<int16_t>(bit); break;
        case AOTPACK_DTYPE_INT8: static_cast<int8_t*>(t.data())[i] = static_cast<int8_t>(bit); break;
        case AOTPACK_DTYPE_UINT8:
        case AOTPACK_DTYPE_BOOL: static_cast<uint8_t*>(t.data())[i] = static_cast<uint8_t>(bit); break;
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// ---- device memory for --io device ------------------------------------------------------------------------

// The inputs in device memory and the outputs read back, through the driver the runtime has loaded already
// (libcuda.so.1, opened here too: the tool has no CUDA toolkit to link against), in the device's primary
// context, which the runtime's sessions use. Freed when it goes.
class CudaMemory {
 public:
  explicit CudaMemory(int device_index) {
    handle_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw RunError("--io device: cannot open the NVIDIA driver library libcuda.so.1");
    bool found = aotpack::resolve_symbol(handle_, "cuDeviceGet", &device_get_) &&
                 aotpack::resolve_symbol(handle_, "cuDevicePrimaryCtxRetain", &retain_) &&
                 aotpack::resolve_symbol(handle_, "cuDevicePrimaryCtxRelease_v2", &release_) &&
                 aotpack::resolve_symbol(handle_, "cuCtxSetCurrent", &set_current_) &&
                 aotpack::resolve_symbol(handle_, "cuMemAlloc_v2", &alloc_) &&
                 aotpack::resolve_symbol(handle_, "cuMemFree_v2", &free_) &&
                 aotpack::resolve_symbol(handle_, "cuMemcpyHtoD_v2", &to_device_) &&
                 aotpack::resolve_symbol(handle_, "cuMemcpyDtoH_v2", &to_host_);
    if (!found) throw RunError("--io device: libcuda.so.1 lacks a function the tool needs; the driver is too old");
    check(device_get_(&device_, device_index), "cuDeviceGet");
    check(retain_(&context_, device_), "cuDevicePrimaryCtxRetain");
    retained_ = true;
  }
  ~CudaMemory() {
    if (!handle_) return;
    if (retained_) {
      set_current_(context_);
      for (uint64_t p : allocations_) free_(p);
      release_(device_);
    }
  }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  // A device copy of `bytes` at `host` (an empty tensor gets memory too: the session checks its pointer).
  void* upload(const void* host, size_t bytes, const std::string& what) {
    check(set_current_(context_), "cuCtxSetCurrent");
    uint64_t p = 0;
    check(alloc_(&p, std::max<size_t>(bytes, 1)), "cuMemAlloc for " + what);
    allocations_.push_back(p);
    if (bytes) check(to_device_(p, host, bytes), "copying " + what + " to the device");
    return reinterpret_cast<void*>(p);
  }
  void download(void* host, const void* device, size_t bytes, const std::string& what) {
    check(set_current_(context_), "cuCtxSetCurrent");
    if (bytes) check(to_host_(host, reinterpret_cast<uint64_t>(device), bytes), "copying " + what + " from the device");
  }

 private:
  static void check(int result, const std::string& what) {
    if (result != 0) throw RunError("--io device: " + what + " failed (CUDA error " + std::to_string(result) + ")");
  }
  void* handle_ = nullptr;
  int device_ = 0;
  void* context_ = nullptr;
  bool retained_ = false;
  std::vector<uint64_t> allocations_;
  int (*device_get_)(int*, int) = nullptr;
  int (*retain_)(void**, int) = nullptr;
  int (*release_)(int) = nullptr;
  int (*set_current_)(void*) = nullptr;
  int (*alloc_)(uint64_t*, size_t) = nullptr;
  int (*free_)(uint64_t) = nullptr;
  int (*to_device_)(uint64_t, const void*, size_t) = nullptr;
  int (*to_host_)(void*, uint64_t, size_t) = nullptr;
};

// ---- outputs ---------------------------------------------------------------------------------------------

std::string shape_string(const aotpack_tensor_t& t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

size_t element_count(const aotpack_tensor_t& t) {
  size_t n = 1;
  for (int d = 0; d < t.rank; ++d) n *= static_cast<size_t>(t.shape[d]);
  return n;
}

void print_output(const char* name, const aotpack_tensor_t& t) {
  size_t n = element_count(t);
  std::printf("output \"%s\": %s %s", name, aotpack_dtype_name(t.dtype), shape_string(t).c_str());
  std::printf(" = [");
  size_t shown = std::min<size_t>(n, 8);
  for (size_t i = 0; i < shown; ++i) std::printf("%s%.6g", i ? ", " : "", element(t.data, t.dtype, i));
  std::printf("%s]\n", n > shown ? ", ..." : "");
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int run(const Args& args) {
  using clock = std::chrono::steady_clock;
  // The library reports its parts (digests, driver, context, modules, weights, ...) on stderr.
  if (args.timings) setenv("AOTPACK_TIMINGS", "1", 1);
  const auto start = clock::now();
  auto t0 = start;
  aotpack_model_options_t model_options;
  aotpack_model_options_init(&model_options);
  model_options.verify_digests = args.verify ? 1 : 0;
  if (args.device == "cuda") {  // set the GPU up while the digests are checked
    model_options.prepare_device_type = AOTPACK_DEVICE_CUDA;
    model_options.prepare_device_index = args.device_index;
  }
  if (!args.public_key.empty()) model_options.public_key_path = args.public_key.c_str();
  if (!args.signature.empty()) model_options.signature_path = args.signature.c_str();
  aotpack::Model model(args.package, model_options);
  double load_ms = ms_since(t0);
  std::printf("digest %s", model.digest().c_str());
  if (!args.public_key.empty())
    std::printf(" (signed by %s: %s)", args.public_key.c_str(),
                (args.signature.empty() ? args.package + ".sig" : args.signature).c_str());
  std::printf("\n");

  aotpack_session_options_t options;
  aotpack_session_options_init(&options);
  options.device_type = args.device == "cuda" ? AOTPACK_DEVICE_CUDA : AOTPACK_DEVICE_CPU;
  options.device_index = args.device_index;
  options.num_threads = args.threads;
  options.cuda_graphs = args.cuda_graphs ? 1 : 0;
  options.cuda_pdl = args.cuda_pdl ? 1 : 0;
  if (args.device_io) options.io_memory = AOTPACK_MEMORY_DEVICE;
  t0 = clock::now();
  aotpack::Session session(model, options);
  double session_ms = ms_since(t0);

  std::vector<aotpack_tensor_info_t> infos;
  for (size_t i = 0; i < model.num_inputs(); ++i) infos.push_back(model.input_info(i));
  std::vector<OwnedTensor> inputs =
      args.inputs.empty() ? random_inputs(infos, args.symbols, args.seed) : read_inputs(args.inputs, infos);
  std::vector<aotpack_tensor_t> views;
  for (OwnedTensor& t : inputs) views.push_back(t.view());
  std::unique_ptr<CudaMemory> cuda_memory;
  if (args.device_io) {  // the same inputs, in device memory; the buffers stay for every run
    cuda_memory = std::make_unique<CudaMemory>(args.device_index);
    for (size_t i = 0; i < views.size(); ++i)
      views[i].data = cuda_memory->upload(inputs[i].data(), inputs[i].bytes, std::string("input \"") + infos[i].name + "\"");
  }

  t0 = clock::now();
  session.run(views);
  double first_ms = ms_since(t0);
  double open_to_first_ms = ms_since(start);
  std::vector<double> times;
  for (int r = 0; r < args.repeat; ++r) {
    t0 = clock::now();
    session.run(views);
    times.push_back(ms_since(t0));
  }
  double queued_ms = 0;  // a run's share of --queue runs queued back to back and waited for once
  if (args.queue > 0) {
    t0 = clock::now();
    for (int r = 0; r < args.queue; ++r) session.enqueue(views, nullptr);  // the legacy default stream
    session.synchronize();
    queued_ms = ms_since(t0) / args.queue;
  }

  std::vector<aotpack::safetensors::TensorView> to_write;
  std::vector<OwnedTensor> read_back(model.num_outputs());  // with --io device, the outputs copied to the host
  for (size_t i = 0; i < model.num_outputs(); ++i) {
    aotpack_tensor_info_t info = model.output_info(i);
    aotpack_tensor_t t = session.output(i);
    if (cuda_memory) {
      const size_t bytes = element_count(t) * aotpack_dtype_size(t.dtype);
      read_back[i].allocate(bytes);
      cuda_memory->download(read_back[i].data(), t.data, bytes, std::string("output \"") + info.name + "\"");
      t.data = read_back[i].data();
    }
    print_output(info.name, t);
    aotpack::safetensors::TensorView v;
    v.name = info.name;
    v.dtype = t.dtype;
    v.shape.assign(t.shape, t.shape + t.rank);
    v.data = static_cast<const uint8_t*>(t.data);
    v.size = element_count(t) * aotpack_dtype_size(t.dtype);
    to_write.push_back(std::move(v));
  }
  if (!args.outputs.empty()) {
    aotpack::Status st = aotpack::safetensors::write_file(args.outputs, to_write);
    if (!st.ok()) throw RunError(st.message());
    std::printf("wrote %s\n", args.outputs.c_str());
  }
  const bool graphs = args.device == "cuda" && args.cuda_graphs;
  std::printf("load %.3f ms, first run %.3f ms%s", load_ms, first_ms, graphs ? " (capture)" : "");
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    double median = times.size() % 2 ? times[times.size() / 2]
                                     : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
    std::printf(", median of %zu runs %.3f ms%s", times.size(), median, graphs ? " (replay)" : "");
  }
  if (args.queue > 0) std::printf(", %d runs queued back to back %.3f ms a run", args.queue, queued_ms);
  if (args.device == "cuda")
    std::printf(" (cuda:%d, %s inputs and outputs, %s%s)\n", args.device_index, args.device_io ? "device" : "host",
                args.cuda_graphs ? "CUDA graphs" : "no CUDA graphs",
                args.cuda_pdl ? "" : ", no programmatic dependent launch");
  else
    std::printf(" (%d thread%s)\n", args.threads, args.threads == 1 ? "" : "s");
  if (args.timings)
    std::fprintf(stderr, "aotpack timing: aotpack-run: model load %.3f ms, session %.3f ms, first run %.3f ms, "
                 "open to first result %.3f ms\n", load_ms, session_ms, first_ms, open_to_first_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parse_args(argc, argv);
    return run(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "aotpack-run: %s (see aotpack-run --help)\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "aotpack-run: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aotpack-run: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "aotpack-run: unexpected error\n");
    return 1;
  }
}
