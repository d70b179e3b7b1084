#include "cpu_workspace.hpp"

#include <cstring>

namespace aotpack {

namespace {

constexpr size_t kMaxKernelMessage = 4096;

}  // namespace

Status CpuWorkspace::create(const CpuExecutable& executable, const WorkspaceOptions& options,
                            const std::vector<const void*>& weight_data, std::unique_ptr<Workspace>* out) {
  const Program& program = executable.program();
  std::unique_ptr<CpuWorkspace> w(new CpuWorkspace(executable));
  AOTPACK_RETURN_IF_ERROR(ThreadPool::create(options.num_threads, executable.scratch_bytes(), &w->pool_));
  AOTPACK_RETURN_IF_ERROR(allocate_host(program.arena_bytes, "the arena", &w->arena_));
  w->outputs_.resize(program.outputs.size());
  w->buffer_data_.assign(program.buffers.size(), nullptr);
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    switch (b.kind) {
      case BufferKind::kInput: break;
      case BufferKind::kWeight: w->buffer_data_[i] = const_cast<void*>(weight_data[i]); break;
      case BufferKind::kArena: w->buffer_data_[i] = w->arena_.get() + b.offset; break;
      case BufferKind::kOutput: {
        std::string what = str_cat("output ", quoted(program.outputs[b.port].name));
        AOTPACK_RETURN_IF_ERROR(allocate_host(b.max_bytes, what.c_str(), &w->outputs_[b.port]));
        w->buffer_data_[i] = w->outputs_[b.port].get();
        break;
      }
    }
  }
  w->step_args_.resize(program.steps.size());
  for (size_t i = 0; i < program.steps.size(); ++i) w->step_args_[i].assign(program.steps[i].args.size() + 1, nullptr);
  w->ctx_.abi_version = AOTPACK_KERNEL_ABI_VERSION;
  w->ctx_.num_threads = options.num_threads;
  w->ctx_.parallel_for = &CpuWorkspace::ctx_parallel_for;
  w->ctx_.report_error = &CpuWorkspace::ctx_report_error;
  w->ctx_.thread_scratch = &CpuWorkspace::ctx_thread_scratch;
  w->ctx_.runtime = w.get();
  *out = std::move(w);
  return Status();
}

void CpuWorkspace::ctx_parallel_for(const aotpack_kernel_ctx* ctx, int64_t n, int64_t grain, aotpack_range_fn fn,
                                    void* closure) {
  static_cast<CpuWorkspace*>(ctx->runtime)->pool_->parallel_for(n, grain, fn, closure);
}

void* CpuWorkspace::ctx_thread_scratch(const aotpack_kernel_ctx* ctx) {
  return static_cast<CpuWorkspace*>(ctx->runtime)->pool_->scratch();
}

void CpuWorkspace::ctx_report_error(const aotpack_kernel_ctx* ctx, const char* message) {
  auto* w = static_cast<CpuWorkspace*>(ctx->runtime);
  std::lock_guard<std::mutex> lock(w->error_mu_);
  if (w->kernel_failed_.load()) return;
  try {
    w->kernel_error_ = message ? std::string(message, strnlen(message, kMaxKernelMessage)) : "(no message)";
  } catch (...) {
    // Out of memory while failing: the run still fails, with a shorter message.
  }
  w->kernel_failed_.store(true);
}

Status CpuWorkspace::bind_inputs(const void* const* inputs, const int64_t* /*symbols*/) {
  const Program& p = executable_.program();
  for (size_t i = 0; i < p.inputs.size(); ++i) buffer_data_[p.inputs[i].buffer] = const_cast<void*>(inputs[i]);
  return Status();
}

Status CpuWorkspace::run_steps(const int64_t* symbols) {
  const Program& p = executable_.program();
  kernel_failed_.store(false);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& step = p.steps[s];
    std::vector<void*>& args = step_args_[s];
    for (size_t a = 0; a < step.args.size(); ++a) args[a] = buffer_data_[step.args[a]];
    executable_.step_kernel(s)(&ctx_, args.data(), symbols);
    if (kernel_failed_.load()) {
      std::lock_guard<std::mutex> lock(error_mu_);
      return invalid_argument("step ", s, " (kernel ", step.kernel, ") failed: ", kernel_error_);
    }
  }
  return Status();
}

// The kernels wrote the outputs in place, and every kernel has returned.
Status CpuWorkspace::collect_outputs(const int64_t* /*symbols*/) { return Status(); }

}  // namespace aotpack
