#include "cuda_workspace.hpp"

#include <algorithm>
#include <string>

#include "dtype.hpp"

namespace aotpack {

using namespace cuda;

namespace {

// The kernels are compiled assuming every buffer pointer is a multiple of 16 (tt.divisibility, for vector
// loads), which the caller's device inputs must honour too.
constexpr CUdeviceptr kKernelAlignment = 16;

}  // namespace

CudaWorkspace::~CudaWorkspace() {
  if (!device_) return;
  const Driver& d = *device_->driver;
  d.cuCtxSetCurrent(device_->context);
  if (stream_) d.cuStreamDestroy(stream_);
  for (CUdeviceptr p : allocations_) d.cuMemFree(p);
}

Status CudaWorkspace::alloc(size_t bytes, CUdeviceptr* out) {
  const Driver& d = *device_->driver;
  AOTPACK_RETURN_IF_ERROR(check(d, d.cuMemAlloc(out, std::max<size_t>(bytes, kDeviceAlignment)),
                                str_cat("cuMemAlloc(", bytes, " bytes) on ", device_->label).c_str()));
  allocations_.push_back(*out);
  return Status();
}

Status CudaWorkspace::bytes_of(const Buffer& b, const int64_t* symbols, uint64_t* out) const {
  uint64_t bytes = dtype_size(b.dtype);
  for (const Expr& e : b.shape) {
    int64_t v = 0;
    AOTPACK_RETURN_IF_ERROR(eval_expr(e, symbols, &v));
    if (v < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(v), &bytes))
      return internal_error("buffer ", b.id, ": bad size");
  }
  *out = bytes;
  return Status();
}

Status CudaWorkspace::create(const CudaExecutable& executable, const WorkspaceOptions& options,
                             std::unique_ptr<Workspace>* out) {
  const Program& program = executable.program();
  const bool device_io = options.io_memory == AOTPACK_MEMORY_DEVICE;
  std::unique_ptr<CudaWorkspace> s(new CudaWorkspace());
  s->executable_ = &executable;
  s->program_ = &program;
  s->device_io_ = device_io;
  // Host memory the outputs are copied back to, before the device is touched (as the session always did).
  s->host_outputs_.resize(program.outputs.size());
  for (const Buffer& b : program.buffers) {
    if (b.kind != BufferKind::kOutput || device_io) continue;
    std::string what = str_cat("output ", quoted(program.outputs[b.port].name));
    AOTPACK_RETURN_IF_ERROR(allocate_host(b.max_bytes, what.c_str(), &s->host_outputs_[b.port]));
  }
  AOTPACK_RETURN_IF_ERROR(executable.device(options.device_index, &s->device_));
  const CudaDevice& dev = *s->device_;
  const Driver& d = *dev.driver;
  AOTPACK_CUDA_CHECK(d, cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
  AOTPACK_CUDA_CHECK(d, cuStreamCreate(&s->stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  // Device memory for the declared maxima: the arena, each output and, unless the caller's device memory
  // is used in place, each input.
  std::vector<int64_t> maxima(program.symbols.size() + 1, 0);
  for (size_t i = 0; i < program.symbols.size(); ++i) maxima[i] = program.symbols[i].max;
  s->buffer_ptrs_.assign(program.buffers.size(), 0);
  CUdeviceptr arena = 0;
  AOTPACK_RETURN_IF_ERROR(s->alloc(static_cast<size_t>(program.arena_bytes), &arena));
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer& buf = program.buffers[b];
    switch (buf.kind) {
      case BufferKind::kWeight: s->buffer_ptrs_[b] = dev.weight_ptrs[b]; break;
      case BufferKind::kArena: s->buffer_ptrs_[b] = arena + static_cast<CUdeviceptr>(buf.offset); break;
      case BufferKind::kOutput:
        AOTPACK_RETURN_IF_ERROR(s->alloc(static_cast<size_t>(buf.max_bytes), &s->buffer_ptrs_[b]));
        break;
      case BufferKind::kInput: {
        if (device_io) break;
        uint64_t bytes = 0;
        AOTPACK_RETURN_IF_ERROR(s->bytes_of(buf, maxima.data(), &bytes));
        AOTPACK_RETURN_IF_ERROR(s->alloc(static_cast<size_t>(bytes), &s->buffer_ptrs_[b]));
        break;
      }
    }
  }
  AOTPACK_RETURN_IF_ERROR(s->alloc(sizeof(int32_t) * std::max<size_t>(executable.plan().steps.size(), 1), &s->error_flags_));
  s->prepare_launches();
  *out = std::move(s);
  return Status();
}

// Builds each step's parameter array once, so a run only updates symbol values (and device inputs).
void CudaWorkspace::prepare_launches() {
  const CudaPlan& plan = executable_->plan();
  host_flags_.assign(plan.steps.size(), 0);
  launches_.resize(plan.steps.size());
  input_slots_.assign(program_->inputs.size(), {});
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const CudaStep& step = plan.steps[i];
    const CudaKernelInfo& k = plan.kernels[step.kernel];
    Launch& l = launches_[i];
    l.pointers.assign(step.args.size(), 0);
    for (size_t a = 0; a < step.args.size(); ++a) {
      const Buffer& buf = program_->buffers[step.args[a]];
      l.pointers[a] = buffer_ptrs_[step.args[a]];
      if (buf.kind == BufferKind::kInput) input_slots_[buf.port].push_back(&l.pointers[a]);
    }
    l.symbols.assign(k.symbols.size(), 0);
    l.flag = error_flags_ + sizeof(int32_t) * i;
    for (CUdeviceptr& p : l.pointers) l.params.push_back(&p);
    for (int64_t& v : l.symbols) l.params.push_back(&v);
    if (!k.errors.empty()) l.params.push_back(&l.flag);
    l.params.push_back(&l.scratch0);
    l.params.push_back(&l.scratch1);
  }
}

Status CudaWorkspace::bind_inputs(const void* const* inputs, const int64_t* symbols) {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  AOTPACK_CUDA_CHECK(d, cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
  if (device_io_) return bind_device_inputs(inputs, symbols);
  return copy_inputs(inputs, symbols);
}

Status CudaWorkspace::collect_outputs(const int64_t* symbols) {
  if (!device_io_) AOTPACK_RETURN_IF_ERROR(copy_outputs(symbols));
  return finish();
}

void* CudaWorkspace::output_data(size_t index) const {
  if (device_io_) return reinterpret_cast<void*>(buffer_ptrs_[program_->outputs[index].buffer]);
  return host_outputs_[index].get();
}

Status CudaWorkspace::copy_inputs(const void* const* host_inputs, const int64_t* symbols) {
  const Driver& d = *device_->driver;
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    size_t b = program_->inputs[i].buffer;
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[b], symbols, &bytes));
    if (bytes == 0) continue;
    CUresult r = d.cuMemcpyHtoDAsync(buffer_ptrs_[b], host_inputs[i], bytes, stream_);
    // The message is built only on failure: building it would allocate in every run.
    if (r != CUDA_SUCCESS)
      return check(d, r, str_cat("copying input ", quoted(program_->inputs[i].name), " to ", device_->label).c_str());
  }
  return Status();
}

// Checks every input's pointer before binding any, so a failed run leaves no launch pointing at memory
// that was refused.
Status CudaWorkspace::bind_device_inputs(const void* const* inputs, const int64_t* symbols) {
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[program_->inputs[i].buffer], symbols, &bytes));
    if (bytes > 0) AOTPACK_RETURN_IF_ERROR(check_device_input(i, reinterpret_cast<CUdeviceptr>(inputs[i]), bytes));
  }
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    for (CUdeviceptr* slot : input_slots_[i]) *slot = reinterpret_cast<CUdeviceptr>(inputs[i]);
  }
  return Status();
}

// A kernel given memory it cannot read faults, and a fault poisons the whole context (the caller's too), so
// every pointer is checked against what the driver knows of it first.
Status CudaWorkspace::check_device_input(size_t i, CUdeviceptr p, uint64_t bytes) const {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  // The input is named only on failure: building the name would allocate in every run.
  auto what = [&] {
    return str_cat("input ", quoted(program_->inputs[i].name), ": device pointer ", reinterpret_cast<const void*>(p));
  };
  if (p % kKernelAlignment != 0)
    return invalid_argument(what(), " is not ", kKernelAlignment, "-byte aligned, which the CUDA kernels assume; "
                            "pass the start of an allocation or an aligned offset into one (copy a view that is not)");
  PointerAttributes attributes;
  Status st = pointer_attributes(d, p, &attributes);
  if (!st.ok()) return st.prefixed(what());
  if (device_memory_problem(attributes, p, bytes, dev.index, dev.context) == DeviceMemoryProblem::kNone) return Status();
  return check_device_memory(attributes, p, bytes, dev.index, dev.context, what(), dev.label);
}

Status CudaWorkspace::run_steps(const int64_t* symbols) {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  const CudaPlan& plan = executable_->plan();
  AOTPACK_CUDA_CHECK(d, cuMemsetD8Async(error_flags_, 0, sizeof(int32_t) * std::max<size_t>(plan.steps.size(), 1), stream_),
                     "clearing the error flags");
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const CudaStep& step = plan.steps[i];
    const CudaKernelInfo& k = plan.kernels[step.kernel];
    Launch& l = launches_[i];
    int64_t grid[3];
    for (int g = 0; g < 3; ++g) {
      Status st = eval_expr(step.grid[g], symbols, &grid[g]);
      if (!st.ok()) return st.prefixed(str_cat("cuda step ", i, " (kernel ", k.name, ") grid"));
      if (grid[g] > dev.max_grid[g])
        return unsupported("cuda step ", i, " (kernel ", k.name, "): grid dimension ", g, " is ", grid[g],
                           ", more than ", dev.label, " allows (", dev.max_grid[g], ")");
    }
    if (grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0) continue;  // nothing to compute at these sizes
    for (size_t j = 0; j < k.symbols.size(); ++j) l.symbols[j] = symbols[k.symbols[j]];
    const CudaDevice::Function& f = dev.functions[step.kernel];
    CUresult r = d.cuLaunchKernel(f.fn, static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                                  static_cast<unsigned>(grid[2]), f.threads, 1, 1, f.shared, stream_, l.params.data(),
                                  nullptr);
    if (r != CUDA_SUCCESS) return check(d, r, str_cat("launching cuda step ", i, " (kernel ", k.name, ")").c_str());
  }
  return Status();
}

Status CudaWorkspace::copy_outputs(const int64_t* symbols) {
  const Driver& d = *device_->driver;
  for (size_t i = 0; i < program_->outputs.size(); ++i) {
    size_t b = program_->outputs[i].buffer;
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[b], symbols, &bytes));
    if (bytes == 0) continue;
    CUresult r = d.cuMemcpyDtoHAsync(host_outputs_[i].get(), buffer_ptrs_[b], bytes, stream_);
    if (r != CUDA_SUCCESS)
      return check(d, r, str_cat("copying output ", quoted(program_->outputs[i].name), " from ", device_->label).c_str());
  }
  return Status();
}

// Reads the error flags back, waits for the stream and reports the first step whose check failed.
Status CudaWorkspace::finish() {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  const CudaPlan& plan = executable_->plan();
  if (!plan.steps.empty())
    AOTPACK_CUDA_CHECK(d, cuMemcpyDtoHAsync(host_flags_.data(), error_flags_, sizeof(int32_t) * plan.steps.size(), stream_),
                       "reading the error flags");
  CUresult r = d.cuStreamSynchronize(stream_);
  if (r != CUDA_SUCCESS) return check(d, r, str_cat("running the model on ", dev.label).c_str());
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    int32_t v = host_flags_[i];
    if (v == 0) continue;
    const CudaKernelInfo& k = plan.kernels[plan.steps[i].kernel];
    std::string what = (v > 0 && static_cast<size_t>(v) <= k.errors.size()) ? k.errors[v - 1] : str_cat("error code ", v);
    return invalid_argument("cuda step ", i, " (kernel ", k.name, ") failed: ", what);
  }
  return Status();
}

}  // namespace aotpack
