#include "fuzz_run.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "aotpack.h"

namespace aotpack_fuzz {
namespace {

// Inputs larger than this are not made (a plan may declare huge ranges; the runtime bounds its own memory).
constexpr size_t kMaxInputBytes = size_t{64} << 20;

// The bytes as a file the loader can open, with no disk involved: a memfd, opened through /proc/self/fd.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = static_cast<int>(syscall(SYS_memfd_create, "aotpack-fuzz", 1u));
    if (fd_ < 0) return;
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

void run_at(const aotpack_model_t* model, bool maxima) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<uint8_t>> data;
  std::vector<aotpack_tensor_t> inputs;
  size_t total = 0;
  for (size_t i = 0; i < aotpack_model_num_inputs(model); ++i) {
    aotpack_tensor_info_t info;
    aotpack_status_t st = aotpack_model_input_info(model, i, &info);
    if (st) {
      aotpack_status_free(st);
      return;
    }
    std::vector<int64_t> shape;
    size_t count = 1;
    for (int d = 0; d < info.rank; ++d) {
      int64_t v = info.dims[d].symbol ? (maxima ? info.dims[d].max : info.dims[d].min) : info.dims[d].size;
      if (v < 0 || __builtin_mul_overflow(count, static_cast<size_t>(v), &count)) return;
      shape.push_back(v);
    }
    size_t bytes = 0;
    if (__builtin_mul_overflow(count, aotpack_dtype_size(info.dtype), &bytes) || bytes > kMaxInputBytes ||
        (total += bytes) > kMaxInputBytes)
      return;
    std::vector<uint8_t> buffer(bytes + 8, 0);
    if (info.dtype == AOTPACK_DTYPE_FLOAT32) {  // a small float; integer inputs stay 0, a valid index anywhere
      const float half = 0.5f;
      for (size_t e = 0; e < count; ++e) std::memcpy(&buffer[e * 4], &half, 4);
    }
    shapes.push_back(std::move(shape));
    data.push_back(std::move(buffer));
    inputs.push_back({info.dtype, info.rank, nullptr, nullptr});
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].shape = shapes[i].data();
    inputs[i].data = data[i].data();
  }
  aotpack_session_t* session = nullptr;
  aotpack_status_t st = aotpack_session_create(model, nullptr, &session);
  if (st) {
    aotpack_status_free(st);
    return;
  }
  st = aotpack_session_run(session, inputs.data(), inputs.size());
  if (!st) {
    for (size_t o = 0; o < aotpack_model_num_outputs(model); ++o) {
      aotpack_tensor_t out;
      aotpack_status_t ost = aotpack_session_output(session, o, &out);
      aotpack_status_free(ost);
    }
  }
  aotpack_status_free(st);
  aotpack_session_destroy(session);
}

}  // namespace

void load_and_run(const uint8_t* data, size_t size) {
  MemFile file(data, size);
  if (file.path().empty()) return;
  aotpack_model_t* model = nullptr;
  aotpack_status_t st = aotpack_model_load(file.path().c_str(), nullptr, &model);
  if (st) {
    aotpack_status_free(st);
    return;
  }
  run_at(model, false);
  run_at(model, true);
  aotpack_model_release(model);
}

}  // namespace aotpack_fuzz
