#include "session.hpp"

#include <cstring>

#include "dtype.hpp"

using namespace aotpack;

namespace {

constexpr int kMaxThreads = 1024;
constexpr size_t kMaxKernelMessage = 4096;

std::string dtype_label(aotpack_dtype_t dtype) {
  const char* name = dtype_name(dtype);
  if (std::strcmp(name, "unknown") == 0) return str_cat("unknown (", static_cast<int>(dtype), ")");
  return name;
}

}  // namespace

Status aotpack_session::allocate(int64_t bytes, const char* what, Memory* out) {
  // Round up to the alignment (aligned_alloc requires a multiple) and never ask for 0 bytes.
  uint64_t size = (static_cast<uint64_t>(bytes) + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  if (size == 0) size = kArenaAlignment;
  void* p = std::aligned_alloc(kArenaAlignment, size);
  if (!p) return resource_exhausted("cannot allocate ", bytes, " bytes for ", what);
  std::memset(p, 0, size);  // touch the pages now rather than in the first run
  out->reset(static_cast<uint8_t*>(p));
  return Status();
}

Status aotpack_session::create(const aotpack_model* model, const aotpack_session_options_t& options,
                               std::unique_ptr<aotpack_session>* out) {
  const bool cuda = options.device_type == AOTPACK_DEVICE_CUDA;
  if (cuda && !model->cuda() && !model->cuda_unavailable().empty())
    return unsupported("the package's CUDA kernels cannot be used: ", model->cuda_unavailable());
  if (cuda && !model->cuda())
    return unsupported("the package has no CUDA kernels (export it with --target cuda or cpu,cuda); use the CPU device");
  if (!cuda && options.device_type != AOTPACK_DEVICE_CPU)
    return invalid_argument("unknown device_type ", static_cast<int>(options.device_type));
  if (!cuda && !model->has_cpu_kernels())
    return unsupported("the package has no CPU kernels this host can run (", model->cpu_unavailable(),
                       "); use a CUDA device");
  if (!cuda && options.device_index != 0)
    return invalid_argument("device_index ", options.device_index, " does not exist: the CPU device is index 0");
  if (options.num_threads < 1 || options.num_threads > kMaxThreads)
    return invalid_argument("num_threads is ", options.num_threads, ", expected 1..", kMaxThreads);
  if (options.io_memory != AOTPACK_MEMORY_HOST && options.io_memory != AOTPACK_MEMORY_DEVICE)
    return invalid_argument("unknown io_memory ", static_cast<int>(options.io_memory),
                            ", expected AOTPACK_MEMORY_HOST (0) or AOTPACK_MEMORY_DEVICE (1)");

  const Program& program = model->program();
  std::unique_ptr<aotpack_session> s(new aotpack_session(model));
  // The CPU's device memory is host memory, so only a CUDA session has anything else to offer.
  s->device_io_ = cuda && options.io_memory == AOTPACK_MEMORY_DEVICE;
  AOTPACK_RETURN_IF_ERROR(ThreadPool::create(options.num_threads, model->kernel_scratch_bytes(), &s->pool_));
  if (!cuda) AOTPACK_RETURN_IF_ERROR(allocate(program.arena_bytes, "the arena", &s->arena_));
  s->outputs_.resize(program.outputs.size());
  s->output_shapes_.resize(program.outputs.size());
  s->buffer_data_.assign(program.buffers.size(), nullptr);
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    switch (b.kind) {
      case BufferKind::kInput: break;
      case BufferKind::kWeight: s->buffer_data_[i] = const_cast<void*>(model->weight_data(i)); break;
      case BufferKind::kArena: s->buffer_data_[i] = cuda ? nullptr : s->arena_.get() + b.offset; break;
      case BufferKind::kOutput: {
        if (s->device_io_) break;  // outputs stay in the CUDA session's device memory
        std::string what = str_cat("output ", quoted(program.outputs[b.port].name));
        AOTPACK_RETURN_IF_ERROR(allocate(b.max_bytes, what.c_str(), &s->outputs_[b.port]));
        s->buffer_data_[i] = s->outputs_[b.port].get();
        break;
      }
    }
  }
  s->step_args_.resize(program.steps.size());
  for (size_t i = 0; i < program.steps.size(); ++i) s->step_args_[i].assign(program.steps[i].args.size() + 1, nullptr);
  s->symbols_.assign(program.symbols.size() + 1, 0);  // +1: never an empty array for kernels to point into
  s->bound_.assign(program.symbols.size(), 0);
  s->ctx_.abi_version = AOTPACK_KERNEL_ABI_VERSION;
  s->ctx_.num_threads = options.num_threads;
  s->ctx_.parallel_for = &aotpack_session::ctx_parallel_for;
  s->ctx_.report_error = &aotpack_session::ctx_report_error;
  s->ctx_.runtime = s.get();
  if (cuda) {  // the arena lives on the device; with host I/O, outputs_ receive the results
    AOTPACK_RETURN_IF_ERROR(
        CudaSession::create(*model->cuda(), program, options.device_index, s->device_io_, &s->cuda_));
  }
  s->ctx_.thread_scratch = &aotpack_session::ctx_thread_scratch;
  *out = std::move(s);
  return Status();
}

void aotpack_session::ctx_parallel_for(const aotpack_kernel_ctx* ctx, int64_t n, int64_t grain, aotpack_range_fn fn,
                                       void* closure) {
  static_cast<aotpack_session*>(ctx->runtime)->pool_->parallel_for(n, grain, fn, closure);
}

void* aotpack_session::ctx_thread_scratch(const aotpack_kernel_ctx* ctx) {
  return static_cast<aotpack_session*>(ctx->runtime)->pool_->scratch();
}

void aotpack_session::ctx_report_error(const aotpack_kernel_ctx* ctx, const char* message) {
  auto* s = static_cast<aotpack_session*>(ctx->runtime);
  std::lock_guard<std::mutex> lock(s->error_mu_);
  if (s->kernel_failed_.load()) return;
  try {
    s->kernel_error_ = message ? std::string(message, strnlen(message, kMaxKernelMessage)) : "(no message)";
  } catch (...) {
    // Out of memory while failing: the run still fails, with a shorter message.
  }
  s->kernel_failed_.store(true);
}

std::string aotpack_session::symbol_values() const {
  const Program& p = model_->program();
  std::string out;
  for (size_t i = 0; i < p.symbols.size(); ++i) out += str_cat(i ? ", " : "", p.symbols[i].name, "=", symbols_[i]);
  return out.empty() ? "(no symbols)" : out;
}

Status aotpack_session::check_inputs(const aotpack_tensor_t* inputs, size_t num_inputs) {
  const Program& p = model_->program();
  if (num_inputs != p.inputs.size()) {
    std::string names;
    for (size_t i = 0; i < p.inputs.size(); ++i) names += (i ? ", " : "") + p.inputs[i].name;
    if (num_inputs < p.inputs.size())
      return invalid_argument("input ", quoted(p.inputs[num_inputs].name), " is missing: the model takes ",
                              p.inputs.size(), " inputs (", names, "), got ", num_inputs);
    return invalid_argument("the model takes ", p.inputs.size(), " inputs (", names, "), got ", num_inputs);
  }
  if (num_inputs > 0 && !inputs) return invalid_argument("inputs is NULL");
  std::fill(bound_.begin(), bound_.end(), 0);
  for (size_t i = 0; i < num_inputs; ++i) {
    const aotpack_tensor_t& t = inputs[i];
    const std::string& name = p.inputs[i].name;
    const Buffer& b = p.buffers[p.inputs[i].buffer];
    if (t.dtype != b.dtype)
      return invalid_argument("input ", quoted(name), ": dtype is ", dtype_label(t.dtype), ", expected ",
                              dtype_name(b.dtype));
    if (t.rank != static_cast<int32_t>(b.shape.size()))
      return invalid_argument("input ", quoted(name), ": rank is ", t.rank, ", expected ", b.shape.size());
    if (t.rank > 0 && !t.shape) return invalid_argument("input ", quoted(name), ": shape is NULL");
    uint64_t bytes = dtype_size(t.dtype);
    for (size_t d = 0; d < b.shape.size(); ++d) {
      int64_t v = t.shape[d];
      const Expr& e = b.shape[d];
      if (v < 0) return invalid_argument("input ", quoted(name), " dim ", d, " = ", v, " is negative");
      if (e.is_const() && v != e.value)
        return invalid_argument("input ", quoted(name), " dim ", d, " = ", v, ", expected ", e.value);
      if (e.is_symbol()) {
        const Symbol& s = p.symbols[e.value];
        if (bound_[e.value] && v != symbols_[e.value])
          return invalid_argument("input ", quoted(name), " dim ", d, " (", s.name, ") = ", v, ", but input ",
                                  quoted(p.inputs[s.input].name), " dim ", s.dim, " gave ", s.name, " = ",
                                  symbols_[e.value]);
        if (!bound_[e.value]) {
          if (v < s.min || v > s.max)
            return out_of_range("input ", quoted(name), " dim ", d, " (", s.name, ") = ", v,
                                " is outside the declared range ", s.min, "..", s.max);
          symbols_[e.value] = v;
          bound_[e.value] = 1;
        }
      }
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(v), &bytes))
        return invalid_argument("input ", quoted(name), ": its size overflows 64 bits");
    }
    if (bytes > 0 && !t.data) return invalid_argument("input ", quoted(name), ": data is NULL");
    buffer_data_[p.inputs[i].buffer] = t.data;
  }
  return Status();
}

Status aotpack_session::plan_buffers() {
  const Program& p = model_->program();
  for (const Buffer& b : p.buffers) {
    if (b.kind != BufferKind::kArena && b.kind != BufferKind::kOutput) continue;
    uint64_t bytes = dtype_size(b.dtype);
    for (size_t d = 0; d < b.shape.size(); ++d) {
      int64_t v = 0;
      Status st = eval_expr(b.shape[d], symbols_.data(), &v);
      if (!st.ok())
        return st.prefixed(str_cat("buffer ", b.id, " (", buffer_kind_name(b.kind), ") dim ", d, " ",
                                   expr_to_string(b.shape[d], p.symbol_names), " at ", symbol_values()));
      if (v < 0)
        return internal_error("buffer ", b.id, " (", buffer_kind_name(b.kind), ") dim ", d, " ",
                              expr_to_string(b.shape[d], p.symbol_names), " is ", v, " at ", symbol_values(),
                              "; a size cannot be negative: this is a bug in the exporter, please report it");
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(v), &bytes)) bytes = UINT64_MAX;
      if (b.kind == BufferKind::kOutput) output_shapes_[b.port][d] = v;
    }
    if (bytes > static_cast<uint64_t>(b.max_bytes))
      return internal_error("buffer ", b.id, " (", buffer_kind_name(b.kind), ") needs ", bytes, " bytes at ",
                            symbol_values(), ", more than its max_bytes ", b.max_bytes,
                            ": this is a bug in the exporter's memory plan, please report it");
  }
  return Status();
}

Status aotpack_session::run_steps() {
  const Program& p = model_->program();
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& step = p.steps[s];
    std::vector<void*>& args = step_args_[s];
    for (size_t a = 0; a < step.args.size(); ++a) args[a] = buffer_data_[step.args[a]];
    model_->step_kernel(s)(&ctx_, args.data(), symbols_.data());
    if (kernel_failed_.load()) {
      std::lock_guard<std::mutex> lock(error_mu_);
      return invalid_argument("step ", s, " (kernel ", step.kernel, ") failed: ", kernel_error_);
    }
  }
  return Status();
}

Status aotpack_session::run(const aotpack_tensor_t* inputs, size_t num_inputs) {
  have_outputs_ = false;
  kernel_failed_.store(false);
  AOTPACK_RETURN_IF_ERROR(check_inputs(inputs, num_inputs));
  AOTPACK_RETURN_IF_ERROR(plan_buffers());
  if (cuda_) {
    const Program& p = model_->program();
    std::vector<const void*> input_data(p.inputs.size());
    std::vector<void*> outputs_host(p.outputs.size());
    for (size_t i = 0; i < p.inputs.size(); ++i) input_data[i] = buffer_data_[p.inputs[i].buffer];
    for (size_t i = 0; i < p.outputs.size(); ++i) outputs_host[i] = device_io_ ? nullptr : outputs_[i].get();
    AOTPACK_RETURN_IF_ERROR(cuda_->run(input_data, symbols_.data(), outputs_host));
    have_outputs_ = true;
    return Status();
  }
  AOTPACK_RETURN_IF_ERROR(run_steps());
  have_outputs_ = true;
  return Status();
}

Status aotpack_session::output(size_t index, aotpack_tensor_t* out) const {
  const Program& p = model_->program();
  if (index >= p.outputs.size())
    return invalid_argument("output index ", index, " is out of range: the model has ", p.outputs.size(), " outputs");
  if (!have_outputs_) return invalid_argument("no outputs: the session has no successful run since the last failure");
  const Buffer& b = p.buffers[p.outputs[index].buffer];
  out->dtype = b.dtype;
  out->rank = static_cast<int32_t>(b.shape.size());
  out->shape = output_shapes_[index].data();
  out->data = device_io_ ? reinterpret_cast<void*>(cuda_->output(index)) : outputs_[index].get();
  return Status();
}
