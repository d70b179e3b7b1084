#include "instance_state.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "triton_status.hpp"

namespace aotpack_triton {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void Discard(TRITONSERVER_Error* error) {
  if (error) {
    Log(TRITONSERVER_LOG_ERROR, TRITONSERVER_ErrorMessage(error));
    TRITONSERVER_ErrorDelete(error);
  }
}

}  // namespace

// A request on its way through Execute.
struct InstanceState::Pending {
  TRITONBACKEND_Request* request = nullptr;
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* error = nullptr;      // set once the request has failed
  std::vector<std::vector<int64_t>> shapes;  // per package input
  std::vector<const void*> data;             // per package input: contiguous host memory
  std::vector<std::vector<char>> copies;     // inputs that Triton gave in several buffers
  std::vector<size_t> outputs;               // the requested outputs, as indices into the signature
  int64_t rows = 1;                          // dim 0 of every input when batching
  uint64_t compute_start = 0, compute_end = 0;
};

TRITONSERVER_Error* InstanceState::Create(TRITONBACKEND_ModelInstance* instance, const ModelState* model,
                                          InstanceState** out) {
  std::unique_ptr<InstanceState> state(new InstanceState());
  state->instance_ = instance;
  state->model_ = model;
  const char* name = nullptr;
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id = 0;
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceName(instance, &name));
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceKind(instance, &kind));
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceDeviceId(instance, &device_id));
  state->name_ = name;

  aotpack_session_options_t options;
  aotpack_session_options_init(&options);
  options.num_threads = model->num_threads();
  if (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU) {
    options.device_type = AOTPACK_DEVICE_CUDA;
    options.device_index = device_id;
    options.cuda_graphs = model->cuda_graphs();
    options.cuda_pdl = model->cuda_pdl();
  } else if (kind != TRITONSERVER_INSTANCEGROUPKIND_CPU) {
    return Error(TRITONSERVER_ERROR_UNSUPPORTED, "instance " + state->name_ + ": the aotpack backend runs "
                 "instance groups of kind KIND_CPU or KIND_GPU; set instance_group's kind to one of them");
  }
  const std::string where = "instance " + state->name_ +
                            (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU ? " (CUDA device " + std::to_string(device_id) + ")"
                                                                        : std::string(" (CPU)")) + ": ";
  AOTPACK_TRITON_RETURN_IF_ERROR(FromStatus(aotpack_session_create(model->model(), &options, &state->session_), where));
  state->staging_.resize(model->signature().inputs.size());
  Log(TRITONSERVER_LOG_INFO, where + "a session of model " + model->name() + ", " +
                                 std::to_string(options.num_threads) + " CPU thread(s)" +
                                 (model->batching() ? ", batching on " + model->signature().batch.name : ""));
  *out = state.release();
  return nullptr;
}

InstanceState::~InstanceState() { aotpack_session_destroy(session_); }

void InstanceState::Prepare(Pending* p) {
  const Signature& sig = model_->signature();
  const size_t n = sig.inputs.size();
  p->shapes.resize(n);
  p->data.resize(n);
  p->copies.resize(n);
  for (size_t i = 0; i < n && !p->error; ++i) {
    const TensorSpec& spec = sig.inputs[i];
    TRITONBACKEND_Input* input = nullptr;
    if (TRITONSERVER_Error* e = TRITONBACKEND_RequestInput(p->request, spec.name.c_str(), &input)) {
      TRITONSERVER_ErrorDelete(e);
      p->error = Error(TRITONSERVER_ERROR_INVALID_ARG, "the request has no input '" + spec.name + "'");
      break;
    }
    TRITONSERVER_DataType dtype;
    const int64_t* shape = nullptr;
    uint32_t rank = 0, buffers = 0;
    uint64_t bytes = 0;
    p->error = TRITONBACKEND_InputProperties(input, nullptr, &dtype, &shape, &rank, &bytes, &buffers);
    if (p->error) break;
    p->shapes[i].assign(shape, shape + rank);
    if (dtype != spec.triton_dtype) {
      p->error = Error(TRITONSERVER_ERROR_INVALID_ARG,
                       "input '" + spec.name + "' must be " + aotpack_dtype_name(spec.dtype));
      break;
    }
    uint64_t expected = aotpack_dtype_size(spec.dtype);
    for (uint32_t d = 0; d < rank; ++d) expected *= static_cast<uint64_t>(shape[d] < 0 ? 0 : shape[d]);
    if (bytes != expected) {
      p->error = Error(TRITONSERVER_ERROR_INVALID_ARG, "input '" + spec.name + "' of shape " +
                       ShapeText(p->shapes[i]) + " holds " + std::to_string(bytes) + " bytes; the shape needs " +
                       std::to_string(expected));
      break;
    }
    // Triton hands an input over in one or more buffers; the runtime takes one contiguous host tensor.
    for (uint32_t b = 0; b < buffers && !p->error; ++b) {
      const void* buffer = nullptr;
      uint64_t size = 0;
      TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
      int64_t memory_id = 0;
      p->error = TRITONBACKEND_InputBuffer(input, b, &buffer, &size, &memory, &memory_id);
      if (p->error) break;
      if (memory == TRITONSERVER_MEMORY_GPU) {
        p->error = Error(TRITONSERVER_ERROR_UNSUPPORTED, "input '" + spec.name + "' is in GPU memory; the aotpack "
                         "backend takes inputs in system memory (send them without CUDA shared memory)");
        break;
      }
      if (buffers == 1) {
        p->data[i] = buffer;
      } else {
        p->copies[i].insert(p->copies[i].end(), static_cast<const char*>(buffer),
                            static_cast<const char*>(buffer) + size);
        p->data[i] = p->copies[i].data();
      }
    }
  }
  if (!p->error && model_->batching()) {
    p->rows = p->shapes.empty() || p->shapes[0].empty() ? 0 : p->shapes[0][0];
  }
  uint32_t count = 0;
  if (!p->error) p->error = TRITONBACKEND_RequestOutputCount(p->request, &count);
  for (uint32_t o = 0; o < count && !p->error; ++o) {
    const char* name = nullptr;
    p->error = TRITONBACKEND_RequestOutputName(p->request, o, &name);
    if (p->error) break;
    size_t index = sig.outputs.size();
    for (size_t k = 0; k < sig.outputs.size(); ++k) {
      if (sig.outputs[k].name == name) index = k;
    }
    if (index == sig.outputs.size()) {
      p->error = Error(TRITONSERVER_ERROR_INVALID_ARG, std::string("the model has no output '") + name + "'");
    } else {
      p->outputs.push_back(index);
    }
  }
}

// Merges: same shapes but dim 0 (compared as given, so the runtime judges them) and rows within the batch max.
static bool CanMerge(const std::vector<std::vector<int64_t>>& a, const std::vector<std::vector<int64_t>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || a[i].empty()) return false;
    if (!std::equal(a[i].begin() + 1, a[i].end(), b[i].begin() + 1)) return false;
  }
  return true;
}

void InstanceState::Execute(TRITONBACKEND_Request** requests, uint32_t count) {
  const uint64_t exec_start = NowNs();
  std::vector<Pending> pending(count);
  for (uint32_t r = 0; r < count; ++r) pending[r].request = requests[r];
  // Execute owns the requests from here on: whatever happens below, every one is answered and released.
  try {
    Run(&pending);
  } catch (const std::exception& e) {
    for (Pending& p : pending) {
      if (!p.error) p.error = Error(TRITONSERVER_ERROR_INTERNAL, std::string("aotpack backend: ") + e.what());
    }
  }
  Respond(&pending, exec_start);
}

void InstanceState::Run(std::vector<Pending>* all) {
  std::vector<Pending>& pending = *all;
  for (Pending& p : pending) {
    p.error = TRITONBACKEND_ResponseNew(&p.response, p.request);
    if (!p.error) Prepare(&p);
  }

  // Groups of requests that run as one: with batching, each request joins the first group it can merge with.
  std::vector<std::vector<Pending*>> groups;
  std::vector<int64_t> group_rows;
  for (Pending& p : pending) {
    if (p.error) continue;
    bool placed = false;
    for (size_t g = 0; model_->batching() && g < groups.size() && !placed; ++g) {
      if (group_rows[g] + p.rows <= model_->max_rows() && CanMerge(groups[g][0]->shapes, p.shapes)) {
        groups[g].push_back(&p);
        group_rows[g] += p.rows;
        placed = true;
      }
    }
    if (!placed) {
      groups.push_back({&p});
      group_rows.push_back(p.rows);
    }
  }
  for (const auto& group : groups) RunGroup(group);
}

void InstanceState::Respond(std::vector<Pending>* all, uint64_t exec_start) {
  const uint64_t exec_end = NowNs();
  for (Pending& p : *all) {
    const bool ok = p.error == nullptr;
    if (p.response) {
      TRITONSERVER_Error* unsent = TRITONBACKEND_ResponseSend(p.response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, p.error);
      if (unsent) Discard(TRITONBACKEND_ResponseDelete(p.response));  // not sent: it is still ours to free
      Discard(unsent);
    } else {
      Log(TRITONSERVER_LOG_ERROR, std::string("instance ") + name_ + ": no response could be made for a request: " +
                                      TRITONSERVER_ErrorMessage(p.error));
    }
    if (p.error) TRITONSERVER_ErrorDelete(p.error);
    const uint64_t start = ok ? p.compute_start : exec_start, end = ok ? p.compute_end : exec_end;
    Discard(TRITONBACKEND_ModelInstanceReportStatistics(instance_, p.request, ok, exec_start, start, end, exec_end));
    Discard(TRITONBACKEND_RequestRelease(p.request, TRITONSERVER_REQUEST_RELEASE_ALL));
  }
}

void InstanceState::RunGroup(const std::vector<Pending*>& group) {
  TRITONSERVER_Error* error = RunOnce(group);
  if (!error) return;
  if (group.size() == 1) {
    group[0]->error = error;
    return;
  }
  // The merged run failed: run each request alone, so that only the requests the runtime refuses fail and
  // each failure carries the runtime's message about that request.
  Log(TRITONSERVER_LOG_WARN, "instance " + name_ + ": a merged run of " + std::to_string(group.size()) +
                                 " requests failed (" + TRITONSERVER_ErrorMessage(error) + "); running them one by one");
  TRITONSERVER_ErrorDelete(error);
  for (Pending* p : group) RunGroup({p});
}

TRITONSERVER_Error* InstanceState::RunOnce(const std::vector<Pending*>& group) {
  const Signature& sig = model_->signature();
  const uint64_t compute_start = NowNs();
  std::vector<aotpack_tensor_t> tensors(sig.inputs.size());
  std::vector<std::vector<int64_t>> shapes(sig.inputs.size());
  int64_t total_rows = 0;
  for (Pending* p : group) total_rows += p->rows;
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    shapes[i] = group[0]->shapes[i];
    const void* data = group[0]->data[i];
    if (group.size() > 1) {  // concatenate the requests' rows
      shapes[i][0] = total_rows;
      std::vector<char>& staging = staging_[i];
      staging.clear();
      for (Pending* p : group) {
        size_t bytes = aotpack_dtype_size(sig.inputs[i].dtype);
        for (int64_t d : p->shapes[i]) bytes *= static_cast<size_t>(d);
        staging.insert(staging.end(), static_cast<const char*>(p->data[i]),
                       static_cast<const char*>(p->data[i]) + bytes);
      }
      data = staging.data();
    }
    tensors[i].dtype = sig.inputs[i].dtype;
    tensors[i].rank = static_cast<int32_t>(shapes[i].size());
    tensors[i].shape = shapes[i].data();
    tensors[i].data = const_cast<void*>(data);
  }
  AOTPACK_TRITON_RETURN_IF_ERROR(
      FromStatus(aotpack_session_run(session_, tensors.data(), tensors.size()), ""));
  const uint64_t compute_end = NowNs();
  int64_t offset = 0;
  for (Pending* p : group) {
    p->compute_start = compute_start;
    p->compute_end = compute_end;
    p->error = WriteOutputs(p, offset);
    offset += p->rows;
  }
  const uint64_t batch = model_->batching() ? static_cast<uint64_t>(total_rows) : 1;
  Discard(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance_, batch, compute_start, compute_start,
                                                           compute_end, NowNs()));
  return nullptr;
}

TRITONSERVER_Error* InstanceState::WriteOutputs(Pending* p, int64_t row_offset) {
  const Signature& sig = model_->signature();
  for (size_t index : p->outputs) {
    aotpack_tensor_t out;
    AOTPACK_TRITON_RETURN_IF_ERROR(FromStatus(aotpack_session_output(session_, index, &out), ""));
    std::vector<int64_t> shape(out.shape, out.shape + out.rank);
    size_t row_bytes = aotpack_dtype_size(out.dtype);
    for (size_t d = model_->batching() ? 1 : 0; d < shape.size(); ++d) row_bytes *= static_cast<size_t>(shape[d]);
    size_t bytes = row_bytes, skip = 0;
    if (model_->batching()) {  // this request's rows of the merged output
      shape[0] = p->rows;
      bytes = row_bytes * static_cast<size_t>(p->rows);
      skip = row_bytes * static_cast<size_t>(row_offset);
    }
    TRITONBACKEND_Output* output = nullptr;
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(p->response, &output, sig.outputs[index].name.c_str(),
                                                                sig.outputs[index].triton_dtype, shape.data(),
                                                                static_cast<uint32_t>(shape.size())));
    void* buffer = nullptr;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &memory, &memory_id));
    if (memory == TRITONSERVER_MEMORY_GPU) {
      return Error(TRITONSERVER_ERROR_UNSUPPORTED, "output '" + sig.outputs[index].name + "' was asked for in GPU "
                   "memory; the aotpack backend writes outputs to system memory (ask without CUDA shared memory)");
    }
    if (bytes) std::memcpy(buffer, static_cast<const char*>(out.data) + skip, bytes);
  }
  return nullptr;
}

}  // namespace aotpack_triton
