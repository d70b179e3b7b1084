// The CUDA backend's executable: a package's Triton cubins loaded from the mapped package (cuModuleLoadData,
// no files) and its weights uploaded, once per model and device.
//
// cuda/sm_<cc>/kernels.json says, per architecture, each kernel's cubin member, warps and shared memory.
#ifndef AOTPACK_SRC_BACKENDS_CUDA_CUDA_EXECUTABLE_HPP_
#define AOTPACK_SRC_BACKENDS_CUDA_CUDA_EXECUTABLE_HPP_

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cuda_driver.hpp"
#include "cuda_plan.hpp"
#include "package.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

// Every device allocation is at least this large and this aligned (cuMemAlloc gives 256 bytes).
constexpr int64_t kDeviceAlignment = 256;

// A model's state on one device: context, loaded functions, weights in device memory. Created on the
// first session on the device, kept until the model is released; immutable afterwards.
class CudaDevice {
 public:
  ~CudaDevice();
  struct Function {
    cuda::CUfunction fn = nullptr;
    unsigned int threads = 0;  // num_warps * 32
    unsigned int shared = 0;
    // May be launched with programmatic dependent launch: kernels.json says the cubin waits for the previous
    // kernel itself (griddepcontrol.wait), the device is sm_90 or newer and the driver has cuLaunchKernelEx.
    // A session launches it so when its cuda_pdl option is on too (CudaWorkspace::programmatic_).
    bool programmatic = false;
    // Bytes of global scratch memory per program (Triton's TMA descriptors made in the kernel); 0: none.
    // The workspace passes each launch a region of scratch_bytes times the launch's programs.
    int64_t scratch_bytes = 0;
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

// The CUDA backend's executable: a loaded model's CUDA plan, and its state on each device it runs on.
// Thread-safe: devices are set up under a lock, once each.
class CudaExecutable final : public Executable {
 public:
  // `package`, `program` and `weight_data` (host data per program buffer) are borrowed from the model
  // that owns this.
  CudaExecutable(const Package* package, const Program* program, const std::vector<const void*>* weight_data,
                 CudaPlan plan)
      : package_(package), program_(program), weight_data_(weight_data), plan_(std::move(plan)) {}

  // Parses the package's CUDA part (no device is touched): OK with *out null when it has none.
  static Status load(const PackageParts& parts, std::unique_ptr<Executable>* out);

  // A CUDA session's workspace on options.device_index, setting the device up first if needed.
  Status create_workspace(const WorkspaceOptions& options, std::unique_ptr<Workspace>* out) const override;
  // The device set up (context, modules, weights) ahead of the first session.
  Status prepare(int device_index) const override {
    const CudaDevice* unused = nullptr;
    return device(device_index, &unused);
  }

  const Program& program() const { return *program_; }
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

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CUDA_CUDA_EXECUTABLE_HPP_
