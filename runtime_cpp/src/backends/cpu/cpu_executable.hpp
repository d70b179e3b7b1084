// The CPU backend's executable: the package's kernel library (cpu/<isa>/kernels.so) for the highest isa this
// host runs, and the function of every step resolved in it.
#ifndef AOTPACK_SRC_BACKENDS_CPU_CPU_EXECUTABLE_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_CPU_EXECUTABLE_HPP_

#include <memory>
#include <string>
#include <vector>

#include "aotpack_kernel_abi.h"
#include "backend.hpp"
#include "kernel_library.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

// Immutable once loaded: safe to share across threads and sessions.
class CpuExecutable final : public Executable {
 public:
  // UNSUPPORTED when the manifest has no CPU target or the host runs none of their isas (the reason the
  // lowest one cannot run); any other failure means the CPU part is damaged.
  static Status load(const PackageParts& parts, std::unique_ptr<Executable>* out);

  Status create_workspace(const WorkspaceOptions& options, std::unique_ptr<Workspace>* out) const override;
  Status create_workspace_with_weights(const WorkspaceOptions& options, const std::vector<const void*>& weight_data,
                                       std::unique_ptr<Workspace>* out) const override;

  const Program& program() const { return *program_; }
  aotpack_kernel_fn step_kernel(size_t step) const { return step_kernels_[step]; }
  int64_t scratch_bytes() const { return library_->scratch_bytes(); }

 private:
  CpuExecutable() = default;
  Status resolve_steps(const std::string& library);

  const Program* program_ = nullptr;
  const std::vector<const void*>* weight_data_ = nullptr;
  std::unique_ptr<KernelLibrary> library_;
  std::vector<aotpack_kernel_fn> step_kernels_;
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_CPU_EXECUTABLE_HPP_
