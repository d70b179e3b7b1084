// A CPU session's workspace: the arena, output memory and thread pool, allocated once at creation, and the
// kernel ABI's context the kernels call back through.
#ifndef AOTPACK_SRC_BACKENDS_CPU_CPU_WORKSPACE_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_CPU_WORKSPACE_HPP_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aotpack_kernel_abi.h"
#include "backend.hpp"
#include "cpu_executable.hpp"
#include "host_memory.hpp"
#include "status.hpp"
#include "thread_pool.hpp"

namespace aotpack {

// One thread at a time, like its session. The CPU's device memory is host memory: inputs are read and
// outputs written in place, and io_memory() is always AOTPACK_MEMORY_HOST.
class CpuWorkspace final : public Workspace {
 public:
  CpuWorkspace(const CpuWorkspace&) = delete;
  CpuWorkspace& operator=(const CpuWorkspace&) = delete;

  // `executable` and `weight_data` (host data per program buffer, for the weights) are borrowed and must
  // outlive the workspace.
  static Status create(const CpuExecutable& executable, const WorkspaceOptions& options,
                       const std::vector<const void*>& weight_data, std::unique_ptr<Workspace>* out);

  aotpack_memory_t io_memory() const override { return AOTPACK_MEMORY_HOST; }
  Status bind_inputs(const void* const* inputs, const int64_t* symbols) override;
  Status run_steps(const int64_t* symbols) override;
  Status collect_outputs(const int64_t* symbols) override;
  void* output_data(size_t index) const override { return outputs_[index].get(); }

 private:
  explicit CpuWorkspace(const CpuExecutable& executable) : executable_(executable) {}

  // The kernel ABI's callbacks; ctx->runtime is the workspace.
  static void ctx_parallel_for(const aotpack_kernel_ctx* ctx, int64_t n, int64_t grain, aotpack_range_fn fn,
                               void* closure);
  static void ctx_report_error(const aotpack_kernel_ctx* ctx, const char* message);
  static void* ctx_thread_scratch(const aotpack_kernel_ctx* ctx);

  const CpuExecutable& executable_;
  std::unique_ptr<ThreadPool> pool_;
  aotpack_kernel_ctx ctx_{};
  HostMemory arena_;
  std::vector<HostMemory> outputs_;             // per program output
  std::vector<void*> buffer_data_;              // per program buffer; inputs are set by each run
  std::vector<std::vector<void*>> step_args_;   // per step, filled by each run

  std::mutex error_mu_;
  std::atomic<bool> kernel_failed_{false};
  std::string kernel_error_;  // the first report_error message of the current step
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_CPU_WORKSPACE_HPP_
