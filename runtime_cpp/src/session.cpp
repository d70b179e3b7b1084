#include "session.hpp"

#include <cstring>

#include "backend_registry.hpp"
#include "c_enum.hpp"
#include "dtype.hpp"
#include "timing.hpp"

using namespace aotpack;

namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxGraphCache = 65536;

std::string dtype_label(int32_t code) {
  aotpack_dtype_t dtype;
  if (!dtype_from_code(code, &dtype)) return str_cat("unknown (", code, ")");
  return dtype_name(dtype);
}

}  // namespace

aotpack_session::~aotpack_session() {
  workspace_.reset();  // the workspace uses the model's executable: gone before the model may be
  model_->release();
}

Status aotpack_session::create(const aotpack_model* model, const aotpack_session_options_t& options,
                               std::unique_ptr<aotpack_session>* out) {
  size_t backend_index = 0;
  if (!find_backend(c_enum_value(options.device_type), &backend_index))
    return invalid_argument("unknown device_type ", c_enum_value(options.device_type));
  const Backend& b = backend(backend_index);
  Status why_not;
  const Executable* executable = model->executable(backend_index, &why_not);
  if (!executable) return b.unavailable(why_not);
  AOTPACK_RETURN_IF_ERROR(b.check_device_index(options.device_index));
  if (options.num_threads < 1 || options.num_threads > kMaxThreads)
    return invalid_argument("num_threads is ", options.num_threads, ", expected 1..", kMaxThreads);
  const int32_t io_memory = c_enum_value(options.io_memory);
  if (io_memory != AOTPACK_MEMORY_HOST && io_memory != AOTPACK_MEMORY_DEVICE)
    return invalid_argument("unknown io_memory ", io_memory,
                            ", expected AOTPACK_MEMORY_HOST (0) or AOTPACK_MEMORY_DEVICE (1)");
  if (options.cuda_graphs != 0 && options.cuda_graphs != 1)
    return invalid_argument("cuda_graphs is ", options.cuda_graphs, ", expected 0 (off) or 1 (on)");
  if (options.cuda_graph_cache_size < 1 || options.cuda_graph_cache_size > kMaxGraphCache)
    return invalid_argument("cuda_graph_cache_size is ", options.cuda_graph_cache_size, ", expected 1..",
                            kMaxGraphCache);
  if (options.cuda_pdl != 0 && options.cuda_pdl != 1)
    return invalid_argument("cuda_pdl is ", options.cuda_pdl, ", expected 0 (off) or 1 (on)");

  const Program& program = model->program();
  std::unique_ptr<aotpack_session> s(new aotpack_session(model));
  s->input_data_.assign(program.inputs.size(), nullptr);
  s->output_shapes_.resize(program.outputs.size());
  s->symbols_.assign(program.symbols.size() + 1, 0);  // +1: never an empty array for kernels to point into
  s->bound_.assign(program.symbols.size(), 0);
  WorkspaceOptions workspace_options;
  workspace_options.device_index = options.device_index;
  workspace_options.num_threads = options.num_threads;
  workspace_options.io_memory = options.io_memory;
  workspace_options.graphs = options.cuda_graphs != 0;
  workspace_options.graph_cache_size = options.cuda_graph_cache_size;
  workspace_options.programmatic_launch = options.cuda_pdl != 0;
  PartTimer timer("session create");
  AOTPACK_RETURN_IF_ERROR(model->create_workspace(*executable, workspace_options, &s->workspace_));
  if (timings_enabled()) timer.stop(b.kind);
  *out = std::move(s);
  return Status();
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
    if (c_enum_value(t.dtype) != static_cast<int32_t>(b.dtype))
      return invalid_argument("input ", quoted(name), ": dtype is ", dtype_label(c_enum_value(t.dtype)), ", expected ",
                              dtype_name(b.dtype));
    if (t.rank != static_cast<int32_t>(b.shape.size()))
      return invalid_argument("input ", quoted(name), ": rank is ", t.rank, ", expected ", b.shape.size());
    if (t.rank > 0 && !t.shape) return invalid_argument("input ", quoted(name), ": shape is NULL");
    uint64_t bytes = dtype_size(b.dtype);  // the input's, checked equal above
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
    input_data_[i] = t.data;
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

Status aotpack_session::in_use_error(const char* call) {
  return invalid_argument(call, " was called while another thread is using this session: a session serves one "
                          "thread at a time; create one session per thread (sessions of one model share its "
                          "weights and kernels)");
}

Status aotpack_session::run(const aotpack_tensor_t* inputs, size_t num_inputs) {
  InUse guard(*this);
  if (guard.busy()) return in_use_error("aotpack_session_run");
  return run_impl(inputs, num_inputs);
}

Status aotpack_session::run_after(const aotpack_tensor_t* inputs, size_t num_inputs, void* stream) {
  InUse guard(*this);
  if (guard.busy()) return in_use_error("aotpack_session_run_after");
  AOTPACK_RETURN_IF_ERROR(workspace_->orderable());
  return run_impl(inputs, num_inputs, &stream);
}

// What every run does before its workspace sees it: the inputs checked against the signature, the symbols
// bound and their ranges checked, the buffers' sizes checked against the plan.
Status aotpack_session::prepare_run(const aotpack_tensor_t* inputs, size_t num_inputs) {
  have_outputs_ = false;
  AOTPACK_RETURN_IF_ERROR(check_inputs(inputs, num_inputs));
  return plan_buffers();
}

Status aotpack_session::run_impl(const aotpack_tensor_t* inputs, size_t num_inputs, void* const* after) {
  AOTPACK_RETURN_IF_ERROR(prepare_run(inputs, num_inputs));
  AOTPACK_RETURN_IF_ERROR(workspace_->bind_inputs(input_data_.data(), symbols_.data()));
  if (after) AOTPACK_RETURN_IF_ERROR(workspace_->wait_on_device(*after));
  AOTPACK_RETURN_IF_ERROR(workspace_->run_steps(symbols_.data()));
  AOTPACK_RETURN_IF_ERROR(workspace_->collect_outputs(symbols_.data()));
  have_outputs_ = true;
  return Status();
}

Status aotpack_session::enqueue(const aotpack_tensor_t* inputs, size_t num_inputs, void* stream) {
  InUse guard(*this);
  if (guard.busy()) return in_use_error("aotpack_session_enqueue");
  AOTPACK_RETURN_IF_ERROR(workspace_->queueable());
  AOTPACK_RETURN_IF_ERROR(prepare_run(inputs, num_inputs));
  AOTPACK_RETURN_IF_ERROR(workspace_->enqueue(input_data_.data(), symbols_.data(), stream));
  have_outputs_ = true;
  return Status();
}

Status aotpack_session::synchronize() {
  InUse guard(*this);
  if (guard.busy()) return in_use_error("aotpack_session_synchronize");
  return workspace_->synchronize();
}

Status aotpack_session::output(size_t index, aotpack_tensor_t* out) const {
  InUse guard(*this);
  if (guard.busy()) return in_use_error("aotpack_session_output");
  const Program& p = model_->program();
  if (index >= p.outputs.size())
    return invalid_argument("output index ", index, " is out of range: the model has ", p.outputs.size(), " outputs");
  if (!have_outputs_) return invalid_argument("no outputs: the session has no successful run since the last failure");
  const Buffer& b = p.buffers[p.outputs[index].buffer];
  out->dtype = b.dtype;
  out->rank = static_cast<int32_t>(b.shape.size());
  out->shape = output_shapes_[index].data();
  out->data = workspace_->output_data(index);
  return Status();
}
