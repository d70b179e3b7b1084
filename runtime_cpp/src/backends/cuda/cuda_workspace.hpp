// A CUDA session's workspace: a stream and device memory for the declared maxima (the arena, each output and,
// with host I/O, each input and host memory the outputs are copied back to), and each step's launch
// parameters, all made at creation so that a run allocates nothing.
#ifndef AOTPACK_SRC_BACKENDS_CUDA_CUDA_WORKSPACE_HPP_
#define AOTPACK_SRC_BACKENDS_CUDA_CUDA_WORKSPACE_HPP_

#include <cstdint>
#include <memory>
#include <vector>

#include "backend.hpp"
#include "cuda_driver.hpp"
#include "cuda_executable.hpp"
#include "host_memory.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

// One thread at a time, like its session.
class CudaWorkspace final : public Workspace {
 public:
  CudaWorkspace(const CudaWorkspace&) = delete;
  CudaWorkspace& operator=(const CudaWorkspace&) = delete;
  ~CudaWorkspace() override;

  // With io_memory AOTPACK_MEMORY_DEVICE, inputs are device pointers used in place and outputs stay in
  // device memory (no copies); otherwise the workspace has device memory for the inputs and copies both
  // ways. `executable` is borrowed and must outlive the workspace.
  static Status create(const CudaExecutable& executable, const WorkspaceOptions& options,
                       std::unique_ptr<Workspace>* out);

  aotpack_memory_t io_memory() const override { return device_io_ ? AOTPACK_MEMORY_DEVICE : AOTPACK_MEMORY_HOST; }
  // Device inputs are checked, then bound into the launch parameters; host inputs are copied in on the stream.
  Status bind_inputs(const void* const* inputs, const int64_t* symbols) override;
  // Launches every step on the session's stream.
  Status run_steps(const int64_t* symbols) override;
  // With host I/O copies the outputs back; then reads the error flags, waits for the stream and reports the
  // first step whose check failed.
  Status collect_outputs(const int64_t* symbols) override;
  // A CUdeviceptr with device I/O, else host memory.
  void* output_data(size_t index) const override;

 private:
  CudaWorkspace() = default;
  Status alloc(size_t bytes, cuda::CUdeviceptr* out);
  Status bytes_of(const Buffer& b, const int64_t* symbols, uint64_t* out) const;
  void prepare_launches();
  Status copy_inputs(const void* const* host_inputs, const int64_t* symbols);
  Status bind_device_inputs(const void* const* inputs, const int64_t* symbols);
  Status check_device_input(size_t i, cuda::CUdeviceptr p, uint64_t bytes) const;
  Status copy_outputs(const int64_t* symbols);
  Status finish();

  const CudaExecutable* executable_ = nullptr;
  const Program* program_ = nullptr;
  const CudaDevice* device_ = nullptr;
  bool device_io_ = false;
  std::vector<HostMemory> host_outputs_;        // per program output, with host I/O
  cuda::CUstream stream_ = nullptr;
  std::vector<cuda::CUdeviceptr> allocations_;
  std::vector<cuda::CUdeviceptr> buffer_ptrs_;  // per program buffer; inputs are 0 with device I/O
  cuda::CUdeviceptr error_flags_ = 0;           // one int32 per step
  std::vector<int32_t> host_flags_;
  // Per step, the launch arguments: buffer pointers, symbol values, flag, and two null hidden scratch
  // pointers (Triton 3.3+ global scratch, 3.5+ profile scratch; extra entries are ignored by older cubins).
  struct Launch {
    std::vector<cuda::CUdeviceptr> pointers;
    std::vector<int64_t> symbols;
    cuda::CUdeviceptr flag = 0, scratch0 = 0, scratch1 = 0;
    std::vector<void*> params;
  };
  std::vector<Launch> launches_;
  // Per program input, the launch pointers that name its buffer: with device I/O, each run writes the
  // caller's pointer there.
  std::vector<std::vector<cuda::CUdeviceptr*>> input_slots_;
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CUDA_CUDA_WORKSPACE_HPP_
