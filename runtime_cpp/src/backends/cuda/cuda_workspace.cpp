#include "cuda_workspace.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <string>

#include "dtype.hpp"
#include "timing.hpp"

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
  // Runs queued on callers' streams may still be running: the memory below is theirs until they end.
  if (queued_) d.cuEventSynchronize(queued_done_);
  if (queued_done_) d.cuEventDestroy(queued_done_);
  // A synchronous run waited for the stream, or left the next call to (settle_unfinished_run): wait here.
  if (run_unfinished_) d.cuStreamSynchronize(stream_);
  if (caller_point_) d.cuEventDestroy(caller_point_);  // after the stream's wait for it, if one is pending
  for (Graph& g : graph_cache_) {
    if (g.exec) d.cuGraphExecDestroy(g.exec);
  }
  if (stream_) d.cuStreamDestroy(stream_);
  for (CUdeviceptr p : allocations_) d.cuMemFree(p);
  for (const std::vector<Staging>* list : {&host_inputs_, &host_outputs_}) {
    for (const Staging& staging : *list) {
      if (staging.data) d.cuMemFreeHost(staging.data);
    }
  }
  for (void* p : retired_staging_) d.cuMemFreeHost(p);
  if (host_flags_) d.cuMemFreeHost(host_flags_);
}

Status CudaWorkspace::alloc(size_t bytes, CUdeviceptr* out) {
  const Driver& d = *device_->driver;
  AOTPACK_RETURN_IF_ERROR(check(d, d.cuMemAlloc(out, std::max<size_t>(bytes, kDeviceAlignment)),
                                str_cat("cuMemAlloc(", bytes, " bytes) on ", device_->label).c_str()));
  allocations_.push_back(*out);
  return Status();
}

Status CudaWorkspace::alloc_pinned(size_t bytes, const std::string& what, void** out, unsigned int flags) {
  const Driver& d = *device_->driver;
  AOTPACK_RETURN_IF_ERROR(check(d, d.cuMemHostAlloc(out, std::max<size_t>(bytes, kDeviceAlignment), flags),
                                str_cat("cuMemHostAlloc(", bytes, " bytes of page-locked host memory for ", what,
                                        ")").c_str()));
  // Page-locked memory is resident already: no need to touch it (nothing reads it before a run writes it).
  return Status();
}

// The error flags (see num_flags_ in the header), zeroed: a check that fails sets its step's.
Status CudaWorkspace::alloc_error_flags(size_t count) {
  const Driver& d = *device_->driver;
  void* flags = nullptr;
  AOTPACK_RETURN_IF_ERROR(alloc_pinned(sizeof(int32_t) * count, "the error flags", &flags, CU_MEMHOSTALLOC_DEVICEMAP));
  host_flags_ = static_cast<int32_t*>(flags);
  num_flags_ = count;
  std::memset(host_flags_, 0, sizeof(int32_t) * count);
  return check(d, d.cuMemHostGetDevicePointer(&error_flags_, flags, 0),
               str_cat("cuMemHostGetDevicePointer (the error flags' address on ", device_->label, ")").c_str());
}

// Makes `staging` hold at least `bytes`: at least twice what it held, at most its maximum (so a range of shapes
// reallocates it a few times at most). The old memory is kept until the session goes: an output of the last run
// may still be read there (a Python copy=False view, which keeps the session alive, outlives the next run), and
// doubling bounds what is kept to less than the final size. A failure leaves the session as it was.
Status CudaWorkspace::grow_staging(Staging* staging, uint64_t bytes, const std::string& what, bool* grown) {
  if (bytes <= staging->capacity && staging->data) return Status();  // (an empty tensor gets memory too)
  if (bytes > staging->max)  // the run's symbols were checked against their ranges
    return internal_error(what, ": ", bytes, " bytes at this shape, more than the ", staging->max,
                          " at the declared maxima");
  const uint64_t capacity = std::min(staging->max, std::max(bytes, 2 * staging->capacity));
  void* data = nullptr;
  AOTPACK_RETURN_IF_ERROR(alloc_pinned(static_cast<size_t>(capacity), what, &data));
  if (staging->data) {
    try {
      retired_staging_.push_back(staging->data);
    } catch (const std::bad_alloc&) {
      device_->driver->cuMemFreeHost(data);
      return resource_exhausted("out of host memory growing the page-locked staging memory for ", what);
    }
  }
  staging->data = data;
  staging->capacity = capacity;
  *grown = true;
  return Status();
}

// The staging memory for this run's sizes, before its inputs are staged.
Status CudaWorkspace::grow_host_staging(const int64_t* symbols) {
  bool grown = false;
  const bool timed = timings_enabled();
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[program_->inputs[i].buffer], symbols, &bytes));
    if (bytes > host_inputs_[i].capacity || !host_inputs_[i].data)  // the name is built only when it is needed
      AOTPACK_RETURN_IF_ERROR(
          grow_staging(&host_inputs_[i], bytes, str_cat("input ", quoted(program_->inputs[i].name)), &grown));
  }
  for (size_t i = 0; i < program_->outputs.size(); ++i) {
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[program_->outputs[i].buffer], symbols, &bytes));
    if (bytes > host_outputs_[i].capacity || !host_outputs_[i].data)
      AOTPACK_RETURN_IF_ERROR(
          grow_staging(&host_outputs_[i], bytes, str_cat("output ", quoted(program_->outputs[i].name)), &grown));
  }
  if (!grown) return Status();
  drop_graphs();  // they copy from and to the old buffers
  if (timed) {
    uint64_t total = 0;
    for (const std::vector<Staging>* list : {&host_inputs_, &host_outputs_}) {
      for (const Staging& staging : *list) total += staging.capacity;
    }
    report_timing("cuda host staging grown (cuMemHostAlloc)",
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                  str_cat(total / 1000000.0, " MB page-locked now"));
  }
  return Status();
}

// Every cached graph destroyed: none is in flight, since every run waited for the stream.
void CudaWorkspace::drop_graphs() {
  const Driver& d = *device_->driver;
  for (Graph& g : graph_cache_) {
    if (g.exec) d.cuGraphExecDestroy(g.exec);
    g.exec = nullptr;
    g.last_used = 0;
  }
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
  AOTPACK_RETURN_IF_ERROR(executable.device(options.device_index, &s->device_));
  const CudaDevice& dev = *s->device_;
  const Driver& d = *dev.driver;
  // Without the driver's graph API the steps are launched directly, as with the option off.
  s->graphs_ = options.graphs && d.has_graphs();
  s->programmatic_ = options.programmatic_launch;
  AOTPACK_CUDA_CHECK(d, cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
  AOTPACK_CUDA_CHECK(d, cuStreamCreate(&s->stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  const auto memory_start = std::chrono::steady_clock::now();  // reported below, with what was allocated
  // Device memory for the declared maxima: the arena, each output and each input, except that without graphs
  // a device-I/O session reads the caller's memory in place.
  std::vector<int64_t> maxima(program.symbols.size() + 1, 0);
  for (size_t i = 0; i < program.symbols.size(); ++i) maxima[i] = program.symbols[i].max;
  s->buffer_ptrs_.assign(program.buffers.size(), 0);
  if (!device_io) {  // the staging memory itself comes with the first host-I/O run
    s->host_inputs_.resize(program.inputs.size());
    s->host_outputs_.resize(program.outputs.size());
  }
  CUdeviceptr arena = 0;
  AOTPACK_RETURN_IF_ERROR(s->alloc(static_cast<size_t>(program.arena_bytes), &arena));
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer& buf = program.buffers[b];
    switch (buf.kind) {
      case BufferKind::kWeight: s->buffer_ptrs_[b] = dev.weight_ptrs[b]; break;
      case BufferKind::kArena: s->buffer_ptrs_[b] = arena + static_cast<CUdeviceptr>(buf.offset); break;
      case BufferKind::kOutput:
        AOTPACK_RETURN_IF_ERROR(s->alloc(static_cast<size_t>(buf.max_bytes), &s->buffer_ptrs_[b]));
        if (!device_io) s->host_outputs_[buf.port].max = static_cast<uint64_t>(buf.max_bytes);
        break;
      case BufferKind::kInput: {
        if (device_io && !s->graphs_) break;
        uint64_t bytes = 0;
        AOTPACK_RETURN_IF_ERROR(s->bytes_of(buf, maxima.data(), &bytes));
        AOTPACK_RETURN_IF_ERROR(s->alloc(static_cast<size_t>(bytes), &s->buffer_ptrs_[b]));
        if (!device_io) s->host_inputs_[buf.port].max = bytes;
        break;
      }
    }
  }
  AOTPACK_RETURN_IF_ERROR(s->scratch_at_maxima(maxima.data(), &s->scratch_capacity_));
  if (s->scratch_capacity_ > 0) AOTPACK_RETURN_IF_ERROR(s->alloc(static_cast<size_t>(s->scratch_capacity_), &s->scratch_));
  AOTPACK_RETURN_IF_ERROR(s->alloc_split_workspace());
  AOTPACK_RETURN_IF_ERROR(s->alloc_error_flags(std::max<size_t>(executable.plan().steps.size(), 1)));
  if (timings_enabled()) {
    const uint64_t device_bytes = static_cast<uint64_t>(program.arena_bytes);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - memory_start).count();
    report_timing("cuda session memory (cuMemAlloc)", ms,
                  str_cat(s->allocations_.size(), " device allocations (arena ", device_bytes / 1000000.0, " MB), ",
                          device_io ? "device I/O" : "host I/O (page-locked staging with the first run)",
                          ", graphs ", s->graphs_ ? "on" : "off"));
  }
  if (s->graphs_) {
    s->graph_cache_.resize(static_cast<size_t>(std::max(options.graph_cache_size, 1)));
    for (Graph& g : s->graph_cache_) {
      g.symbols.assign(program.symbols.size(), 0);
      g.inputs.assign(program.inputs.size(), 0);
    }
  }
  s->run_inputs_.assign(program.inputs.size(), 0);
  s->prepare_launches();
  *out = std::move(s);
  return Status();
}

// The global scratch the steps need: for each kernel that takes some, its bytes per program times its launch's
// programs at the declared maxima, the most of any step (grids only grow with the symbols: products of ceiling
// divisions, and persistent kernels' minimum with the SM count). queue_steps checks each launch against it.
Status CudaWorkspace::scratch_at_maxima(const int64_t* maxima, uint64_t* out) const {
  const CudaPlan& plan = executable_->plan();
  *out = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    for (const auto& [kernel, grid] : step_launches(plan.steps[i])) {
      const int64_t per_program = device_->functions[kernel].scratch_bytes;
      if (per_program == 0) continue;
      uint64_t bytes = static_cast<uint64_t>(per_program);
      for (int g = 0; g < 3; ++g) {
        int64_t v = 0;
        AOTPACK_RETURN_IF_ERROR(eval_expr((*grid)[g], maxima, &v).prefixed(str_cat("cuda step ", i, " grid")));
        if (v < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(v), &bytes))
          return internal_error("cuda step ", i, ": scratch memory size overflows");
      }
      *out = std::max(*out, bytes);
    }
  }
  return Status();
}

// The split-K kernels' counts (zeroed here, before any run) and partial sums: as many as the kernel that takes
// most (parse_split bounds them; queue_steps checks each launch against its kernel's).
Status CudaWorkspace::alloc_split_workspace() {
  int64_t programs = 0, bytes = 0;
  for (const CudaKernelInfo& k : executable_->plan().kernels) {
    programs = std::max(programs, k.split_programs);
    bytes = std::max(bytes, k.split_programs * k.split_tile_bytes);
  }
  if (programs == 0) return Status();
  const size_t count_bytes = sizeof(int32_t) * static_cast<size_t>(programs);
  AOTPACK_RETURN_IF_ERROR(alloc(count_bytes, &split_counts_));
  AOTPACK_RETURN_IF_ERROR(alloc(static_cast<size_t>(bytes), &split_parts_));
  const Driver& d = *device_->driver;
  AOTPACK_CUDA_CHECK(d, cuMemsetD8Async(split_counts_, 0, count_bytes, stream_), "clearing the split-K counts");
  // Waited for here: a run queued on a caller's stream (enqueue) is not ordered after the session's own stream.
  AOTPACK_CUDA_CHECK(d, cuStreamSynchronize(stream_), "clearing the split-K counts (waiting for it)");
  return Status();
}

// Builds each step's parameter array once, so a run only updates symbol values (and device inputs).
void CudaWorkspace::prepare_launches() {
  const CudaPlan& plan = executable_->plan();
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
    bool splits = false;
    for (const auto& launch : step_launches(step)) splits = splits || plan.kernels[launch.first].split_programs > 0;
    if (splits) {
      l.split_counts = split_counts_;
      l.split_parts = split_parts_;
      l.split_params = l.params;
      l.split_params.push_back(&l.split_counts);
      l.split_params.push_back(&l.split_parts);
      l.split_params.push_back(&l.scratch0);
      l.split_params.push_back(&l.scratch1);
    }
    l.params.push_back(&l.scratch0);
    l.params.push_back(&l.scratch1);
  }
}

Status CudaWorkspace::bind_inputs(const void* const* inputs, const int64_t* symbols) {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  AOTPACK_CUDA_CHECK(d, cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
  AOTPACK_RETURN_IF_ERROR(settle_unfinished_run());
  AOTPACK_RETURN_IF_ERROR(settle_queued_runs());
  run_unfinished_ = true;  // until finish() has waited for it
  if (device_io_) return bind_device_inputs(inputs, symbols);
  AOTPACK_RETURN_IF_ERROR(grow_host_staging(symbols));
  AOTPACK_RETURN_IF_ERROR(stage_host_inputs(inputs, symbols));
  return graphs_ ? Status() : queue_input_copies(symbols);  // a graph holds its input copies
}

Status CudaWorkspace::collect_outputs(const int64_t* symbols) {
  if (!graphs_ && !device_io_) AOTPACK_RETURN_IF_ERROR(queue_output_copies(symbols));  // a graph holds these copies
  return finish();
}

void* CudaWorkspace::output_data(size_t index) const {
  if (device_io_) return reinterpret_cast<void*>(buffer_ptrs_[program_->outputs[index].buffer]);
  return host_outputs_[index].data;
}

// The caller's host inputs into the page-locked staging memory, from which the device copies them
// asynchronously at full bandwidth (and which a graph can name, unlike the caller's memory).
Status CudaWorkspace::stage_host_inputs(const void* const* host_inputs, const int64_t* symbols) {
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[program_->inputs[i].buffer], symbols, &bytes));
    if (bytes > 0) std::memcpy(host_inputs_[i].data, host_inputs[i], bytes);
  }
  return Status();
}

Status CudaWorkspace::queue_input_copies(const int64_t* symbols) {
  const Driver& d = *device_->driver;
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    size_t b = program_->inputs[i].buffer;
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[b], symbols, &bytes));
    if (bytes == 0) continue;
    CUresult r = d.cuMemcpyHtoDAsync(buffer_ptrs_[b], host_inputs_[i].data, bytes, stream_);
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
  for (size_t i = 0; i < program_->inputs.size(); ++i) run_inputs_[i] = reinterpret_cast<CUdeviceptr>(inputs[i]);
  if (!graphs_) point_input_slots_at(true);  // with graphs, replay_or_record decides
  return Status();
}

// The launches read the caller's inputs (this run's pointers), or the session's input buffers.
void CudaWorkspace::point_input_slots_at(bool caller_inputs) {
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    const CUdeviceptr p = caller_inputs ? run_inputs_[i] : buffer_ptrs_[program_->inputs[i].buffer];
    for (CUdeviceptr* slot : input_slots_[i]) *slot = p;
  }
}

// This run's device inputs into the session's input buffers, for a graph that reads those.
Status CudaWorkspace::queue_device_input_copies(const int64_t* symbols, CUstream stream) {
  const Driver& d = *device_->driver;
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    const size_t b = program_->inputs[i].buffer;
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[b], symbols, &bytes));
    if (bytes == 0) continue;
    CUresult r = d.cuMemcpyDtoDAsync(buffer_ptrs_[b], run_inputs_[i], bytes, stream);
    if (r != CUDA_SUCCESS)
      return check(d, r, str_cat("copying input ", quoted(program_->inputs[i].name), " into the session's buffer on ",
                                 device_->label).c_str());
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
  return graphs_ ? replay_or_record(symbols, stream_) : queue_steps(symbols, stream_);
}

// Replays the graph of this shape (and, with device I/O, of this run's input pointers, or of the session's input
// buffers: see Graph) on `stream`, recording it first if the cache has none (on the session's own stream, which
// only records while it captures: the graph runs where it is launched).
Status CudaWorkspace::replay_or_record(const int64_t* symbols, CUstream stream) {
  const Driver& d = *device_->driver;
  ++graph_clock_;
  Graph* g = device_io_ ? find_graph(symbols, true) : nullptr;
  const bool in_place = g != nullptr || (device_io_ && !has_graph(symbols));
  if (!in_place) {
    if (device_io_) AOTPACK_RETURN_IF_ERROR(queue_device_input_copies(symbols, stream));
    g = find_graph(symbols, false);
  }
  if (!g) {
    g = graph_to_replace();
    if (g->exec) {  // evicted; if a queued run still replays it, the driver frees it when that ends
      CUresult r = d.cuGraphExecDestroy(g->exec);
      g->exec = nullptr;
      g->last_used = 0;
      AOTPACK_RETURN_IF_ERROR(check(d, r, "cuGraphExecDestroy"));
    }
    if (device_io_) point_input_slots_at(in_place);
    bool unsupported = false;
    Status st = capture(symbols, &g->exec, &unsupported);
    if (unsupported) {
      // The stream cannot capture here (the driver or its configuration refuses): this session launches
      // directly from now on, this run included, reading device inputs in place (as runs without graphs do).
      graphs_ = false;
      report_timing("cuda graphs off for this session, capture refused", 0, st.message());
      if (device_io_) point_input_slots_at(true);
      else AOTPACK_RETURN_IF_ERROR(queue_input_copies(symbols));
      return queue_steps(symbols, stream);
    }
    AOTPACK_RETURN_IF_ERROR(st);
    std::copy(symbols, symbols + g->symbols.size(), g->symbols.begin());
    g->reads_caller_inputs = in_place;
    if (in_place) std::copy(run_inputs_.begin(), run_inputs_.end(), g->inputs.begin());
  }
  g->last_used = graph_clock_;
  CUresult r = d.cuGraphLaunch(g->exec, stream);
  if (r != CUDA_SUCCESS) return check(d, r, str_cat("cuGraphLaunch (replaying the run on ", device_->label, ")").c_str());
  return Status();
}

// The shape's graph that reads the caller's inputs at this run's pointers, or the one that reads the session's
// input buffers (the only kind with host I/O).
CudaWorkspace::Graph* CudaWorkspace::find_graph(const int64_t* symbols, bool reads_caller_inputs) {
  for (Graph& g : graph_cache_) {
    if (g.last_used != 0 && g.reads_caller_inputs == reads_caller_inputs &&
        std::equal(g.symbols.begin(), g.symbols.end(), symbols) &&
        (!reads_caller_inputs || g.inputs == run_inputs_))
      return &g;
  }
  return nullptr;
}

bool CudaWorkspace::has_graph(const int64_t* symbols) const {
  for (const Graph& g : graph_cache_) {
    if (g.last_used != 0 && std::equal(g.symbols.begin(), g.symbols.end(), symbols)) return true;
  }
  return false;
}

// An empty entry, else the least recently used.
CudaWorkspace::Graph* CudaWorkspace::graph_to_replace() {
  Graph* best = &graph_cache_[0];
  for (Graph& g : graph_cache_) {
    if (g.last_used < best->last_used) best = &g;
  }
  return best;
}

Status CudaWorkspace::queue_run(const int64_t* symbols) {
  if (!device_io_) AOTPACK_RETURN_IF_ERROR(queue_input_copies(symbols));
  AOTPACK_RETURN_IF_ERROR(queue_steps(symbols, stream_));
  if (!device_io_) AOTPACK_RETURN_IF_ERROR(queue_output_copies(symbols));
  return Status();
}

// Records what a run at this shape queues into a graph and instantiates it. Nothing runs while the stream
// captures; a failure ends the capture, so the stream stays usable. *unsupported (with the reason returned) when
// the stream would not capture work that queued fine: the caller then runs without graphs. A failed launch or
// instantiation is the run's error.
Status CudaWorkspace::capture(const int64_t* symbols, CUgraphExec* out, bool* unsupported) {
  const Driver& d = *device_->driver;
  PartTimer capture_timer("cuda graph capture");
  CUresult began = d.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (began != CUDA_SUCCESS) {
    *unsupported = true;
    return check(d, began, str_cat("cuStreamBeginCapture on ", device_->label).c_str());
  }
  Status queued = queue_run(symbols);
  CUgraph graph = nullptr;
  CUresult ended = d.cuStreamEndCapture(stream_, &graph);
  if (!queued.ok()) {
    if (graph) d.cuGraphDestroy(graph);
    return queued;
  }
  if (ended != CUDA_SUCCESS || !graph) {
    if (graph) d.cuGraphDestroy(graph);
    *unsupported = true;
    if (ended == CUDA_SUCCESS) return internal_error("cuStreamEndCapture returned no graph");
    return check(d, ended, str_cat("cuStreamEndCapture on ", device_->label).c_str());
  }
  capture_timer.stop();
  PartTimer instantiate_timer("cuda graph instantiate");
  CUresult r = d.cuGraphInstantiateWithFlags ? d.cuGraphInstantiateWithFlags(out, graph, 0)
                                             : d.cuGraphInstantiate(out, graph, nullptr, nullptr, 0);
  // The executable graph does not need the graph it was made from.
  d.cuGraphDestroy(graph);
  if (r != CUDA_SUCCESS) *out = nullptr;
  return check(d, r, str_cat("cuGraphInstantiate (a CUDA graph of ", launches_.size(), " steps on ", device_->label,
                             ")").c_str());
}

Status CudaWorkspace::queue_steps(const int64_t* symbols, CUstream stream) {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  const CudaPlan& plan = executable_->plan();
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const CudaStep& step = plan.steps[i];
    size_t kernel = 0;
    const std::array<Expr, 3>* step_grid = nullptr;
    Status chosen = choose_variant(step, symbols, &kernel, &step_grid);
    if (!chosen.ok()) return chosen.prefixed(str_cat("cuda step ", i, " (kernel ", plan.kernels[step.kernel].name, ") size"));
    const CudaKernelInfo& k = plan.kernels[kernel];
    Launch& l = launches_[i];
    int64_t grid[3];
    for (int g = 0; g < 3; ++g) {
      Status st = eval_expr((*step_grid)[g], symbols, &grid[g]);
      if (!st.ok()) return st.prefixed(str_cat("cuda step ", i, " (kernel ", k.name, ") grid"));
      if (grid[g] > dev.max_grid[g])
        return unsupported("cuda step ", i, " (kernel ", k.name, "): grid dimension ", g, " is ", grid[g],
                           ", more than ", dev.label, " allows (", dev.max_grid[g], ")");
    }
    if (grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0) continue;  // nothing to compute at these sizes
    for (size_t j = 0; j < k.symbols.size(); ++j) l.symbols[j] = symbols[k.symbols[j]];
    const CudaDevice::Function& f = dev.functions[kernel];
    const unsigned gx = static_cast<unsigned>(grid[0]), gy = static_cast<unsigned>(grid[1]),
                   gz = static_cast<unsigned>(grid[2]);
    l.scratch0 = 0;
    if (f.scratch_bytes > 0) {
      uint64_t need = static_cast<uint64_t>(f.scratch_bytes);
      const bool overflow = __builtin_mul_overflow(need, uint64_t{gx}, &need) ||
                            __builtin_mul_overflow(need, uint64_t{gy}, &need) ||
                            __builtin_mul_overflow(need, uint64_t{gz}, &need);
      if (overflow || need > scratch_capacity_)  // sized at the maxima, which the run's symbols were checked against
        return internal_error("cuda step ", i, " (kernel ", k.name, "): needs ", need, " bytes of scratch memory, more "
                              "than the ", scratch_capacity_, " sized at the declared maxima");
      l.scratch0 = scratch_;
    }
    if (k.split_programs > 0 && static_cast<uint64_t>(gx) * gy * gz > static_cast<uint64_t>(k.split_programs))
      return internal_error("cuda step ", i, " (kernel ", k.name, "): a split-K launch of ", gx, " x ", gy, " x ", gz,
                            " programs, more than the ", k.split_programs, " the package sized its workspace for");
    void** params = k.split_programs > 0 ? l.split_params.data() : l.params.data();
    CUresult r;
    if (f.programmatic && programmatic_) {
      // The kernel may start while the previous one finishes; it waits for it before touching memory.
      CUlaunchAttribute attr{};
      attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr.value.programmatic_stream_serialization_allowed = 1;
      CUlaunchConfig config{gx, gy, gz, f.threads, 1, 1, f.shared, stream, &attr, 1};
      r = d.cuLaunchKernelEx(&config, f.fn, params, nullptr);
    } else {
      r = d.cuLaunchKernel(f.fn, gx, gy, gz, f.threads, 1, 1, f.shared, stream, params, nullptr);
    }
    if (r != CUDA_SUCCESS) return check(d, r, str_cat("launching cuda step ", i, " (kernel ", k.name, ")").c_str());
  }
  return Status();
}

Status CudaWorkspace::queue_output_copies(const int64_t* symbols) {
  const Driver& d = *device_->driver;
  for (size_t i = 0; i < program_->outputs.size(); ++i) {
    size_t b = program_->outputs[i].buffer;
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[b], symbols, &bytes));
    if (bytes == 0) continue;
    CUresult r = d.cuMemcpyDtoHAsync(host_outputs_[i].data, buffer_ptrs_[b], bytes, stream_);
    if (r != CUDA_SUCCESS)
      return check(d, r, str_cat("copying output ", quoted(program_->outputs[i].name), " from ", device_->label).c_str());
  }
  return Status();
}

// Before a synchronous run: the queued runs waited for (they share the session's memory), and a check that
// failed in one of them returned rather than lost; this run then does not start.
Status CudaWorkspace::settle_queued_runs() {
  if (!queued_) return Status();
  Status st = wait_for_queued_runs();
  if (st.ok()) return st;
  return st.prefixed("a run queued by aotpack_session_enqueue before this one failed, and this one did not start "
                     "(aotpack_session_synchronize reports a queued run's failure)");
}

Status CudaWorkspace::queueable() const {
  if (device_io_) return Status();
  return invalid_argument("aotpack_session_enqueue needs a session with device I/O (io_memory AOTPACK_MEMORY_DEVICE); "
                          "this one's outputs are copied to host memory, which only a call that waits can give back: "
                          "use aotpack_session_run, or create the session with device I/O");
}

Status CudaWorkspace::enqueue(const void* const* inputs, const int64_t* symbols, void* caller_stream) {
  AOTPACK_RETURN_IF_ERROR(queueable());
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  const CUstream stream = static_cast<CUstream>(caller_stream);
  AOTPACK_CUDA_CHECK(d, cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
  AOTPACK_RETURN_IF_ERROR(settle_unfinished_run());
  if (!queued_done_)
    AOTPACK_CUDA_CHECK(d, cuEventCreate(&queued_done_, CU_EVENT_DISABLE_TIMING), "cuEventCreate (a queued run's end)");
  AOTPACK_RETURN_IF_ERROR(bind_device_inputs(inputs, symbols));  // checks every pointer; queues nothing
  // The previous queued run writes the same arena and outputs: on another stream, this one waits for it there.
  if (queued_ && stream != queued_stream_)
    AOTPACK_CUDA_CHECK(d, cuStreamWaitEvent(stream, queued_done_, 0),
                       "cuStreamWaitEvent (ordering this run after the session's previous one, queued on another "
                       "stream)");
  Status st = graphs_ ? replay_or_record(symbols, stream) : queue_steps(symbols, stream);
  if (st.ok()) {
    CUresult r = d.cuEventRecord(queued_done_, stream);
    if (r == CUDA_SUCCESS) {
      queued_ = true;
      queued_stream_ = stream;
      return Status();
    }
    st = check(d, r, "cuEventRecord (marking the end of the queued run)");
  }
  // Part of the run may be queued, with nothing to wait for it by: wait for the stream now, so that no run is in
  // flight when this returns. Its flags, and the earlier queued runs', are still reported by synchronize.
  d.cuStreamSynchronize(stream);
  queued_ = true;
  queued_stream_ = nullptr;  // the event marks an earlier point (or none): nothing in flight is after it
  return st;
}

// bind_inputs made the context current and queued nothing that the caller's stream could be writing (host I/O's
// copies read the session's staging memory); the run's graph or launches follow on the session's stream.
Status CudaWorkspace::wait_on_device(void* caller_stream) {
  const Driver& d = *device_->driver;
  if (!caller_point_)
    AOTPACK_CUDA_CHECK(d, cuEventCreate(&caller_point_, CU_EVENT_DISABLE_TIMING),
                       "cuEventCreate (the point of the caller's stream a run waits for)");
  AOTPACK_CUDA_CHECK(d, cuEventRecord(caller_point_, static_cast<CUstream>(caller_stream)),
                     "cuEventRecord (on the stream given to aotpack_session_run_after)");
  AOTPACK_CUDA_CHECK(d, cuStreamWaitEvent(stream_, caller_point_, 0),
                     "cuStreamWaitEvent (the session's stream after the given stream's work)");
  return Status();
}

Status CudaWorkspace::synchronize() {
  if (!queued_) return Status();
  AOTPACK_CUDA_CHECK(*device_->driver, cuCtxSetCurrent(device_->context), "cuCtxSetCurrent");
  return wait_for_queued_runs();
}

// The queued runs' end waited for here, and their flags read (the device's context is current).
Status CudaWorkspace::wait_for_queued_runs() {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  CUresult r = d.cuEventSynchronize(queued_done_);
  if (r != CUDA_SUCCESS) return check(d, r, str_cat("running the model's queued runs on ", dev.label).c_str());
  queued_ = false;
  return report_failed_check();
}

// A run that failed after queuing work and before finish() may have left copies and kernels on the stream that
// still read the staging memory or write the flags: the next run waits for them, and clears the flags, before
// it writes or queues anything.
Status CudaWorkspace::settle_unfinished_run() {
  if (!run_unfinished_) return Status();
  const Driver& d = *device_->driver;
  AOTPACK_CUDA_CHECK(d, cuStreamSynchronize(stream_), "waiting for the work of the session's last (failed) run");
  std::memset(host_flags_, 0, sizeof(int32_t) * num_flags_);
  run_unfinished_ = false;
  return Status();
}

// Waits for the stream and reports the first step whose check failed, clearing the flags for the next run.
Status CudaWorkspace::finish() {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  CUresult r = d.cuStreamSynchronize(stream_);
  if (r != CUDA_SUCCESS) return check(d, r, str_cat("running the model on ", dev.label).c_str());
  run_unfinished_ = false;
  return report_failed_check();
}

// The first step whose check failed since the flags were last read, clearing them for the next run; OK when none.
// The runs that could set them must have ended.
Status CudaWorkspace::report_failed_check() {
  const CudaPlan& plan = executable_->plan();
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    int32_t v = host_flags_[i];
    if (v == 0) continue;
    std::memset(host_flags_, 0, sizeof(int32_t) * num_flags_);
    const CudaKernelInfo& k = plan.kernels[plan.steps[i].kernel];
    std::string what = (v > 0 && static_cast<size_t>(v) <= k.errors.size()) ? k.errors[v - 1] : str_cat("error code ", v);
    return invalid_argument("cuda step ", i, " (kernel ", k.name, ") failed: ", what);
  }
  return Status();
}

}  // namespace aotpack
