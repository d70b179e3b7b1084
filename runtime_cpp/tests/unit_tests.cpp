// Unit tests of the runtime's hand-written pieces (JSON, SHA-256, size expressions, zip directory,
// safetensors, the checks of device pointers, the staged weight upload), run by tests/runtime/test_runtime_tool.py. No framework: each CHECK prints what failed.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/cuda_driver.hpp"
#include "backends/cuda/cuda_weight_upload.hpp"
#include "elf_image.hpp"
#include "expr.hpp"
#include "json.hpp"
#include "json_reader.hpp"
#include "plan_check.hpp"
#include "safetensors.hpp"
#include "sha256.hpp"
#include "signature.hpp"
#include "zip_reader.hpp"

using namespace aotpack;

static int g_failures = 0;

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
      ++g_failures;                                                  \
    }                                                                \
  } while (0)

static std::string sha(const std::string& s) {
  return sha256_hex(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

static void test_sha256() {
  CHECK(sha("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding boundaries (55, 56, 63, 64 bytes) against known digests.
  CHECK(sha(std::string(55, 'a')) == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  CHECK(sha(std::string(56, 'a')) == "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  CHECK(sha(std::string(64, 'a')) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  // The SHA-extensions path (where this CPU has it) against the portable one, at every tail length and on
  // more than one block per call.
  std::printf("sha256: SHA extensions %s\n", sha256_accelerated() ? "used" : "not available");
  std::vector<uint8_t> bytes(70000);
  uint32_t x = 12345;
  for (auto& b : bytes) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t n : {size_t{0}, size_t{1}, size_t{55}, size_t{56}, size_t{63}, size_t{64}, size_t{65}, size_t{127},
                   size_t{128}, size_t{1000}, size_t{4099}, size_t{70000}})
    CHECK(sha256_hex(bytes.data(), n, Sha256Impl::kBest) == sha256_hex(bytes.data(), n, Sha256Impl::kPortable));
}

static bool parses(const std::string& text, json::Value* out = nullptr) {
  json::Value v;
  bool ok = json::parse(text, &v).ok();
  if (out) *out = v;
  return ok;
}

static void test_json() {
  json::Value v;
  CHECK(parses(R"({"a": [1, -2, 3.5, true, false, null, "x\n\u00e9\ud83d\ude00"], "b": {}})", &v));
  CHECK(v.find("a")->as_array()[1].as_int() == -2);
  CHECK(v.find("a")->as_array()[2].as_double() == 3.5);
  CHECK(v.find("a")->as_array()[6].as_string() == "x\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(parses("9223372036854775807", &v) && v.is_int() && v.as_int() == std::numeric_limits<int64_t>::max());
  CHECK(parses("9223372036854775808", &v) && !v.is_int());
  CHECK(!parses(""));
  CHECK(!parses("[1,]"));
  CHECK(!parses("{\"a\":1,}"));
  CHECK(!parses("{\"a\":1,\"a\":2}"));
  CHECK(!parses("01"));
  CHECK(!parses("1."));
  CHECK(!parses("NaN"));
  CHECK(!parses("[1] x"));
  CHECK(!parses("\"a\tb\""));
  CHECK(!parses("\"\\ud800\""));
  CHECK(!parses("// c\n1"));
  CHECK(parses("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));
  CHECK(!parses("\"\xe3\x28\""));      // bad continuation
  CHECK(!parses("\"\xc0\xaf\""));      // overlong
  CHECK(!parses("\"\xed\xa0\x80\""));  // encoded surrogate
  CHECK(!parses("\"\xf4\x90\x80\x80\""));  // above U+10FFFF
  CHECK(!parses("\"\xe2\x82\""));      // truncated
  CHECK(!parses(std::string(200, '[') + std::string(200, ']')));
  json::Value bad;
  Status st = json::parse("{\n  \"a\": tru\n}", &bad);
  CHECK(!st.ok() && st.message().find("line 2 column 8") != std::string::npos);
  CHECK(json::quote("a\"b\\\n\x01") == "\"a\\\"b\\\\\\n\\u0001\"");
}

static Status eval(const std::string& text, std::vector<int64_t> symbols, int64_t* out) {
  json::Value v;
  Status st = json::parse(text, &v);
  if (!st.ok()) return st;
  Expr e;
  std::vector<std::string> names = {"a", "b"};
  st = parse_expr(v, names, JsonReader("test"), "e", &e);
  if (!st.ok()) return st;
  return eval_expr(e, symbols.data(), out);
}

static void test_expr() {
  int64_t r = 0;
  CHECK(eval("[\"+\", \"a\", 2, [\"*\", \"b\", 3]]", {5, 7}, &r).ok() && r == 28);
  CHECK(eval("[\"//\", -7, 2]", {0, 0}, &r).ok() && r == -4);
  CHECK(eval("[\"//\", 7, -2]", {0, 0}, &r).ok() && r == -4);
  CHECK(eval("[\"%\", -7, 3]", {0, 0}, &r).ok() && r == 2);
  CHECK(eval("[\"%\", 7, -3]", {0, 0}, &r).ok() && r == -2);
  CHECK(eval("[\"max\", \"a\", \"b\", 4]", {5, 7}, &r).ok() && r == 7);
  CHECK(eval("[\"min\", \"a\", \"b\"]", {5, 7}, &r).ok() && r == 5);
  CHECK(eval("[\"*\", -1, [\"//\", [\"*\", -1, \"a\"], 4]]", {5, 0}, &r).ok() && r == 2);  // ceil(5/4)
  CHECK(!eval("[\"*\", \"a\", \"a\"]", {int64_t{1} << 32, 0}, &r).ok());
  CHECK(!eval("[\"+\", 9223372036854775807, \"a\"]", {1, 0}, &r).ok());
  CHECK(!eval("[\"//\", \"a\", \"b\"]", {1, 0}, &r).ok());
  CHECK(!eval("[\"%\", \"a\", \"b\"]", {1, 0}, &r).ok());
  CHECK(!eval("[\"//\", -9223372036854775808, -1]", {0, 0}, &r).ok());
  CHECK(!eval("\"c\"", {0, 0}, &r).ok());
  CHECK(!eval("[\"^\", 1, 2]", {0, 0}, &r).ok());
  CHECK(!eval("[\"//\", 1]", {0, 0}, &r).ok());
  CHECK(!eval("[\"max\", 1]", {0, 0}, &r).ok());
  CHECK(!eval("1.5", {0, 0}, &r).ok());
  CHECK(!eval("true", {0, 0}, &r).ok());
}

static Status bound(const std::string& text, int64_t* out) {
  json::Value v;
  Status st = json::parse(text, &v);
  if (!st.ok()) return st;
  std::vector<Symbol> symbols(2);
  symbols[0] = {"a", 1, 2048};
  symbols[1] = {"b", 3, 5};
  Expr e;
  st = parse_expr(v, {"a", "b"}, JsonReader("test"), "e", &e);
  if (!st.ok()) return st;
  return expr_upper_bound(e, symbols, out);
}

static void test_expr_upper_bound() {
  int64_t r = 0;
  CHECK(bound("[\"*\", \"a\", \"b\", 4]", &r).ok() && r == 2048 * 5 * 4);
  CHECK(bound("[\"//\", [\"+\", \"a\", 127], 128]", &r).ok() && r == 16);
  CHECK(bound("[\"%\", \"a\", 8]", &r).ok() && r == 7);
  CHECK(bound("[\"%\", \"b\", 8]", &r).ok() && r == 5);  // always below the divisor: itself
  CHECK(bound("[\"max\", \"a\", [\"*\", \"b\", 1000]]", &r).ok() && r == 5000);
  CHECK(bound("[\"min\", \"a\", 7]", &r).ok() && r == 7);
  CHECK(bound("[\"+\", \"a\", [\"*\", -1, \"b\"]]", &r).ok() && r == 2045);
  CHECK(!bound("[\"//\", \"a\", [\"+\", \"b\", -4]]", &r).ok());  // the divisor's range holds 0
  CHECK(!bound("[\"*\", \"a\", 9223372036854775807]", &r).ok());
  CHECK(!bound("[\"//\", -9223372036854775808, [\"+\", \"b\", -6]]", &r).ok());
}

static void test_elf_image() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  std::vector<uint8_t> self((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(self.size() > 4096);
  CHECK(check_elf_image("self", host_shared_library(), self.data(), self.size()).ok());
  for (size_t cut : {self.size() - 1, self.size() / 2, size_t{200}, size_t{63}, size_t{4}, size_t{0}}) {
    Status st = check_elf_image("self", host_shared_library(), self.data(), cut);
    CHECK(!st.ok() && st.code() == AOTPACK_DATA_LOSS && st.message().find("self is not a whole kernel library") == 0);
  }
  Status cubin = check_elf_image("self", cuda_cubin(), self.data(), self.size());
  CHECK(!cubin.ok() && cubin.code() == AOTPACK_UNSUPPORTED);
}

static void test_zip_rejects_garbage() {
  std::vector<ZipMember> members;
  std::vector<uint8_t> junk(100, 0x50);
  CHECK(!read_zip_directory(junk.data(), junk.size(), &members).ok());
  // An end-of-central-directory record pointing past itself.
  std::vector<uint8_t> eocd = {0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 1, 0, 1, 0, 46, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  Status st = read_zip_directory(eocd.data(), eocd.size(), &members);
  CHECK(!st.ok() && st.code() == AOTPACK_DATA_LOSS);
  std::vector<uint8_t> empty_zip = {0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(read_zip_directory(empty_zip.data(), empty_zip.size(), &members).ok() && members.empty());
}

static void test_safetensors_round_trip() {
  float values[6] = {1, 2, 3, 4, 5, 6};
  safetensors::TensorView t;
  t.name = "w\"eird";
  t.dtype = AOTPACK_DTYPE_FLOAT32;
  t.shape = {2, 3};
  t.data = reinterpret_cast<const uint8_t*>(values);
  t.size = sizeof(values);
  const char* path = "/tmp/aotpack-unit-test.safetensors";
  CHECK(safetensors::write_file(path, {t}).ok());
  FILE* f = std::fopen(path, "rb");
  std::vector<uint8_t> bytes(4096);
  size_t n = std::fread(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  std::remove(path);
  bytes.resize(n);
  CHECK((bytes[0] | (bytes[1] << 8)) % 8 == 0);
  std::vector<safetensors::TensorView> back;
  CHECK(safetensors::parse(bytes.data(), bytes.size(), &back).ok());
  CHECK(back.size() == 1 && back[0].name == t.name && back[0].shape == t.shape);
  CHECK(back.size() == 1 && std::memcmp(back[0].data, values, sizeof(values)) == 0);
  bytes.pop_back();  // truncated: the tensor now runs past the data area
  CHECK(!safetensors::parse(bytes.data(), bytes.size(), &back).ok());
}

// The verdicts on a caller's device pointer, from attributes as the driver would report them (no GPU needed).
static void test_device_pointer_checks() {
  using namespace cuda;
  CUcontext ours = reinterpret_cast<CUcontext>(0x100), theirs = reinterpret_cast<CUcontext>(0x200);
  const CUdeviceptr p = 0x7f0000001000;
  auto verdict = [&](const PointerAttributes& a, uint64_t bytes) {
    return check_device_memory(a, p, bytes, 0, ours, "input \"x\"", "CUDA device 0").message();
  };
  PointerAttributes device;
  device.context = ours;
  device.memory_type = CU_MEMORYTYPE_DEVICE;
  device.ordinal = 0;
  device.range_start = p - 0x1000;
  device.range_size = 0x2000;
  CHECK(verdict(device, 0x1000).empty());  // exactly up to the end of the allocation
  CHECK(verdict(device, 0x1001).find("4096 bytes before the end of its allocation, too few for the tensor's 4097") !=
        std::string::npos);
  PointerAttributes unknown;
  CHECK(verdict(unknown, 4).find("is not memory the CUDA driver knows") != std::string::npos);
  PointerAttributes pinned = device;
  pinned.memory_type = CU_MEMORYTYPE_HOST;
  CHECK(verdict(pinned, 4).find("host memory registered with CUDA") != std::string::npos);
  PointerAttributes other_device = device;
  other_device.ordinal = 1;
  CHECK(verdict(other_device, 4).find("memory of CUDA device 1, but the session runs on CUDA device 0") !=
        std::string::npos);
  PointerAttributes other_context = device;
  other_context.context = theirs;
  CHECK(verdict(other_context, 4).find("another CUDA context") != std::string::npos);
  PointerAttributes no_context = device;  // memory the driver ties to no context (cuMemMap)
  no_context.context = nullptr;
  CHECK(verdict(no_context, 4).empty());
  PointerAttributes managed = other_context;  // managed memory is readable from any device and context
  managed.managed = 1;
  managed.ordinal = -1;
  CHECK(verdict(managed, 4).empty());
  PointerAttributes outside = device;
  outside.range_start = p + 16;
  CHECK(verdict(outside, 4).find("outside the allocation") != std::string::npos);
  PointerAttributes no_range = device;  // nothing known of the allocation's extent: not refused for it
  no_range.range_size = 0;
  CHECK(verdict(no_range, 1 << 30).empty());
  CHECK(check_device_memory(unknown, p, 4, 0, ours, "w", "d").code() == AOTPACK_INVALID_ARGUMENT);
  // The verdict alone, as a run takes it (no message built).
  CHECK(device_memory_problem(device, p, 0x1000, 0, ours) == DeviceMemoryProblem::kNone);
  CHECK(device_memory_problem(device, p, 0x1001, 0, ours) == DeviceMemoryProblem::kTooShort);
  CHECK(device_memory_problem(unknown, p, 4, 0, ours) == DeviceMemoryProblem::kUnknown);
  CHECK(device_memory_problem(managed, p, 4, 0, ours) == DeviceMemoryProblem::kNone);
  CHECK(device_memory_problem(outside, p, 4, 0, ours) == DeviceMemoryProblem::kOutsideAllocation);
}

static void test_base64_and_pae() {
  std::string out;
  CHECK(base64_decode("", &out) && out.empty());
  CHECK(base64_decode("TQ==", &out) && out == "M");
  CHECK(base64_decode("TWE=", &out) && out == "Ma");
  CHECK(base64_decode("TWFu", &out) && out == "Man");
  CHECK(base64_decode("TWE", &out) && out == "Ma");  // padding optional
  CHECK(base64_decode("-_8=", &out) && out == "\xfb\xff");  // the URL-safe alphabet
  CHECK(base64_decode("+/8=", &out) && out == "\xfb\xff");
  CHECK(!base64_decode("T", &out));       // a length no encoding has
  CHECK(!base64_decode("TQ=", &out));     // padding that does not complete the quad
  CHECK(!base64_decode("TQ===", &out));
  CHECK(!base64_decode("TR==", &out));    // stray bits in the last character
  CHECK(!base64_decode("TW E", &out));
  CHECK(!base64_decode("TWE=TWE=", &out));
  CHECK(!base64_decode(std::string("TW\0u", 4), &out));
  // DSSE's PAE, as its specification's example gives it.
  CHECK(dsse_pae("http://example.com/HelloWorld", "hello world") ==
        "DSSEv1 29 http://example.com/HelloWorld 11 hello world");
  CHECK(dsse_pae("", "") == "DSSEv1 0  0 ");
}


// A driver whose asynchronous copies really are asynchronous: queued, and run only when an event recorded after
// them is waited for, so that an upload which refilled a staging buffer before its copies ran would deliver the
// refilled bytes, not the weights. "Device" memory is host memory.
namespace upload_stub {
struct Copy {
  cuda::CUdeviceptr dst;
  const void* src;
  size_t bytes;
};
std::vector<Copy> queue;                  // not yet run, in order
std::vector<size_t> marks(2, 0);          // per event: how much of the queue it covers
int host_allocs = 0, fail_host_alloc = 0, sync_copies = 0;
std::vector<std::vector<uint8_t>> pinned;

cuda::CUresult mem_host_alloc(void** p, size_t bytes, unsigned int) {
  if (fail_host_alloc) return 2;
  pinned.emplace_back(bytes, 0xEE);
  *p = pinned.back().data();
  ++host_allocs;
  return 0;
}
cuda::CUresult mem_free_host(void*) { return 0; }
cuda::CUresult event_create(cuda::CUevent* e, unsigned int) {
  static int next = 0;
  *e = reinterpret_cast<cuda::CUevent>(static_cast<uintptr_t>(1 + next++ % 2));
  return 0;
}
size_t event_index(cuda::CUevent e) { return static_cast<size_t>(reinterpret_cast<uintptr_t>(e)) - 1; }
cuda::CUresult event_record(cuda::CUevent e, cuda::CUstream) {
  marks[event_index(e)] = queue.size();
  return 0;
}
size_t done = 0;  // queue entries run so far
cuda::CUresult event_synchronize(cuda::CUevent e) {
  for (; done < marks[event_index(e)]; ++done)
    std::memcpy(reinterpret_cast<void*>(queue[done].dst), queue[done].src, queue[done].bytes);
  return 0;
}
cuda::CUresult event_destroy(cuda::CUevent) { return 0; }
cuda::CUresult copy_async(cuda::CUdeviceptr dst, const void* src, size_t bytes, cuda::CUstream) {
  queue.push_back({dst, src, bytes});
  return 0;
}
cuda::CUresult copy_sync(cuda::CUdeviceptr dst, const void* src, size_t bytes) {
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  ++sync_copies;
  return 0;
}
cuda::CUresult stream_synchronize(cuda::CUstream) { return 0; }
cuda::CUresult error_name(cuda::CUresult, const char** s) {
  *s = "CUDA_ERROR_OUT_OF_MEMORY";
  return 0;
}
}  // namespace upload_stub

static void test_staged_weight_upload() {
  using namespace upload_stub;
  cuda::Driver d{};
  d.cuMemHostAlloc = mem_host_alloc;
  d.cuMemFreeHost = mem_free_host;
  d.cuEventCreate = event_create;
  d.cuEventRecord = event_record;
  d.cuEventSynchronize = event_synchronize;
  d.cuEventDestroy = event_destroy;
  d.cuMemcpyHtoDAsync = copy_async;
  d.cuMemcpyHtoD = copy_sync;
  d.cuStreamSynchronize = stream_synchronize;
  d.cuGetErrorName = error_name;
  d.cuGetErrorString = error_name;
  // Three weights, two larger than a staging buffer and one that straddles a buffer boundary.
  const size_t sizes[] = {kWeightStagingBytes + 1000, 3, 2 * kWeightStagingBytes + 13};
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<WeightCopy> copies;
  uint32_t x = 99;
  for (size_t n : sizes) {
    src.emplace_back(n);
    for (uint8_t& b : src.back()) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
    dst.emplace_back(n, 0);
  }
  for (size_t i = 0; i < src.size(); ++i)
    copies.push_back({reinterpret_cast<cuda::CUdeviceptr>(dst[i].data()), src[i].data(), src[i].size(),
                      static_cast<int64_t>(i)});
  std::string how;
  CHECK(upload_weights(d, copies, "test device", &how).ok());
  CHECK(done == queue.size() && queue.size() > 4);  // every copy ran before upload_weights returned
  CHECK(host_allocs == 2);
  CHECK(how.find("through 2 page-locked staging buffers of 4194304 bytes") == 0);
  for (size_t i = 0; i < src.size(); ++i) CHECK(dst[i] == src[i]);

  // No page-locked memory to be had: the same bytes by synchronous copies, and *how says why.
  fail_host_alloc = 1;
  for (auto& v : dst) std::fill(v.begin(), v.end(), 0);
  CHECK(upload_weights(d, copies, "test device", &how).ok());
  CHECK(sync_copies == 3);
  CHECK(how.find("synchronous pageable copies: no page-locked staging memory (cuMemHostAlloc(") == 0);
  for (size_t i = 0; i < src.size(); ++i) CHECK(dst[i] == src[i]);
}

int main() {
  test_sha256();
  test_base64_and_pae();
  test_json();
  test_expr();
  test_expr_upper_bound();
  test_elf_image();
  test_zip_rejects_garbage();
  test_safetensors_round_trip();
  test_device_pointer_checks();
  test_staged_weight_upload();
  if (g_failures) {
    std::printf("%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("all unit tests passed\n");
  return 0;
}
