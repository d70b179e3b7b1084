// The CUDA backend: a package's Triton cubins loaded from the mapped package (cuModuleLoadData, no files),
// weights uploaded once per model and device, and per session a stream and one device arena.
//
// program.json's "cuda" section (docs/package-format.md) says which kernel each step launches, with which
// buffers, symbols and grid; cuda/sm_<cc>/kernels.json says, per architecture, each kernel's cubin member,
// warps and shared memory.
#ifndef AOTPACK_SRC_CUDA_BACKEND_HPP_
#define AOTPACK_SRC_CUDA_BACKEND_HPP_

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_driver.hpp"
#include "expr.hpp"
#include "json.hpp"
#include "package.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

struct CudaKernelInfo {
  std::string name;
  std::vector<size_t> symbols;      // program symbols passed after the buffers, in order
  std::vector<std::string> errors;  // message of error-flag value i + 1; empty: the kernel takes no flag
};

struct CudaStep {
  size_t kernel = 0;             // index into CudaPlan::kernels
  std::vector<size_t> args;      // indices into Program::buffers
  std::array<Expr, 3> grid;      // launch grid over the symbols
};

// What the package says about CUDA, parsed and validated at load (before any device is touched).
struct CudaPlan {
  std::vector<int64_t> archs;  // compute capabilities with cubins, as 10 * major + minor
  int64_t min_driver_version = 0;
  std::string ptx_version;
  std::vector<CudaKernelInfo> kernels;
  std::vector<CudaStep> steps;
};

// Parses the manifest's cuda target and program.json's "cuda" section. *present is false (and OK) when the
// package has no CUDA target.
Status parse_cuda_plan(const json::Value& manifest, const json::Value& program_doc, const Program& program,
                       bool* present, CudaPlan* out);

// A model's state on one device: context, loaded functions, weights in device memory. Created on the
// first session on the device, kept until the model is released; immutable afterwards.
class CudaDevice {
 public:
  ~CudaDevice();
  struct Function {
    cuda::CUfunction fn = nullptr;
    unsigned int threads = 0;  // num_warps * 32
    unsigned int shared = 0;
  };
  const cuda::Driver* driver = nullptr;
  int index = 0;
  cuda::CUdevice device = 0;
  cuda::CUcontext context = nullptr;
  std::string label;  // "CUDA device 0 (NVIDIA H200, sm_90)", for messages
  std::array<int, 3> max_grid{};
  std::vector<cuda::CUmodule> modules;
  std::vector<Function> functions;             // per CudaPlan::kernels
  cuda::CUdeviceptr weights = 0;               // one allocation for all weights
  std::vector<cuda::CUdeviceptr> weight_ptrs;  // per program buffer; 0 for other kinds
};

// The CUDA side of a loaded model. Thread-safe: devices are set up under a lock, once each.
class CudaModel {
 public:
  // `package`, `program` and `weight_data` (host data per program buffer) are borrowed from the model
  // that owns this.
  CudaModel(const Package* package, const Program* program, const std::vector<const void*>* weight_data,
            CudaPlan plan)
      : package_(package), program_(program), weight_data_(weight_data), plan_(std::move(plan)) {}

  const CudaPlan& plan() const { return plan_; }
  // The model's state on device `index`, set up on first use: checks the compute capability and the
  // driver version against the package, loads the modules and uploads the weights.
  Status device(int index, const CudaDevice** out) const;

 private:
  Status set_up(int index, std::unique_ptr<CudaDevice>* out) const;

  const Package* package_;
  const Program* program_;
  const std::vector<const void*>* weight_data_;
  CudaPlan plan_;
  mutable std::mutex mu_;
  mutable std::map<int, std::unique_ptr<CudaDevice>> devices_;
};

// A session's device memory and stream. One thread at a time, like its session.
class CudaSession {
 public:
  ~CudaSession();
  // `device_io`: inputs are device pointers used in place and outputs stay in device memory (no copies);
  // otherwise the session allocates device memory for the inputs and copies both ways.
  static Status create(const CudaModel& model, const Program& program, int device_index, bool device_io,
                       std::unique_ptr<CudaSession>* out);

  // Runs every step on the session's stream and waits for it. `inputs[i]` is input i's data: a device
  // pointer with device I/O (checked, then read in place), else host memory (copied in). With host I/O,
  // `host_outputs[i]` receives output i; with device I/O it is unused and the outputs stay at output().
  // `symbols` are the run's bound values.
  Status run(const std::vector<const void*>& inputs, const int64_t* symbols, const std::vector<void*>& host_outputs);

  // Output i's device memory (sized for the declared maxima).
  cuda::CUdeviceptr output(size_t i) const { return buffer_ptrs_[program_->outputs[i].buffer]; }

 private:
  CudaSession() = default;
  Status alloc(size_t bytes, cuda::CUdeviceptr* out);
  Status bytes_of(const Buffer& b, const int64_t* symbols, uint64_t* out) const;
  void prepare_launches();
  Status copy_inputs(const std::vector<const void*>& host_inputs, const int64_t* symbols);
  Status bind_device_inputs(const std::vector<const void*>& inputs, const int64_t* symbols);
  Status check_device_input(size_t i, cuda::CUdeviceptr p, uint64_t bytes) const;
  Status launch_steps(const int64_t* symbols);
  Status copy_outputs(const std::vector<void*>& host_outputs, const int64_t* symbols);
  Status finish();

  const CudaModel* model_ = nullptr;
  const Program* program_ = nullptr;
  const CudaDevice* device_ = nullptr;
  bool device_io_ = false;
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

#endif  // AOTPACK_SRC_CUDA_BACKEND_HPP_
