#include "cuda_backend.hpp"

#include <algorithm>
#include <cstring>

#include "dtype.hpp"
#include "json_reader.hpp"

namespace aotpack {

using namespace cuda;

namespace {

constexpr int64_t kDeviceAlignment = 256;
// The kernels are compiled assuming every buffer pointer is a multiple of 16 (tt.divisibility, for vector
// loads), which the caller's device inputs must honour too.
constexpr CUdeviceptr kKernelAlignment = 16;

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

std::string archs_string(const std::vector<int64_t>& archs) {
  std::string s;
  for (size_t i = 0; i < archs.size(); ++i) s += str_cat(i ? ", " : "", "sm_", archs[i]);
  return s;
}

std::string driver_string(int version) { return str_cat(version / 1000, ".", version % 1000 / 10); }

Status parse_index_list(const JsonReader& r, const json::Value& obj, const std::string& path, const char* key,
                        size_t limit, const char* what, std::vector<size_t>* out) {
  const std::vector<json::Value>* items;
  AOTPACK_RETURN_IF_ERROR(r.array_field(obj, path, key, &items));
  for (size_t i = 0; i < items->size(); ++i) {
    const json::Value& v = (*items)[i];
    std::string p = JsonReader::join(JsonReader::join(path, key), i);
    if (!v.is_int()) return r.error(p, "expected an integer");
    if (v.as_int() < 0 || static_cast<uint64_t>(v.as_int()) >= limit)
      return r.error(p, str_cat(what, " ", v.as_int(), " does not exist"));
    out->push_back(static_cast<size_t>(v.as_int()));
  }
  return Status();
}

}  // namespace

Status parse_cuda_plan(const json::Value& manifest, const json::Value& program_doc, const Program& program,
                       bool* present, CudaPlan* out) {
  *present = false;
  JsonReader m("manifest.json");
  const std::vector<json::Value>* targets;
  AOTPACK_RETURN_IF_ERROR(m.array_field(manifest, "", "targets", &targets));
  const json::Value* target = nullptr;
  std::string target_path;
  for (size_t i = 0; i < targets->size(); ++i) {
    const json::Value* kind = (*targets)[i].find("kind");
    if (kind && kind->is_string() && kind->as_string() == "cuda") {
      target = &(*targets)[i];
      target_path = JsonReader::join("targets", i);
    }
  }
  if (!target) return Status();
  CudaPlan plan;
  const std::vector<json::Value>* archs;
  AOTPACK_RETURN_IF_ERROR(m.array_field(*target, target_path, "archs", &archs));
  for (size_t i = 0; i < archs->size(); ++i) {
    const json::Value& a = (*archs)[i];
    if (!a.is_int() || a.as_int() < 10 || a.as_int() > 1000)
      return m.error(JsonReader::join(JsonReader::join(target_path, "archs"), i), "expected a compute capability like 90");
    plan.archs.push_back(a.as_int());
  }
  if (plan.archs.empty()) return m.error(target_path, "a cuda target with no archs");
  AOTPACK_RETURN_IF_ERROR(m.int_field(*target, target_path, "min_driver_version", &plan.min_driver_version));
  AOTPACK_RETURN_IF_ERROR(m.string_field(*target, target_path, "ptx_version", &plan.ptx_version));

  JsonReader r("program.json");
  const json::Value* section;
  AOTPACK_RETURN_IF_ERROR(r.object_field(program_doc, "", "cuda", &section));
  const std::vector<json::Value>* kernels;
  AOTPACK_RETURN_IF_ERROR(r.array_field(*section, "cuda", "kernels", &kernels));
  for (size_t i = 0; i < kernels->size(); ++i) {
    std::string path = JsonReader::join("cuda.kernels", i);
    CudaKernelInfo k;
    AOTPACK_RETURN_IF_ERROR(r.string_field((*kernels)[i], path, "name", &k.name));
    AOTPACK_RETURN_IF_ERROR(parse_index_list(r, (*kernels)[i], path, "symbols", program.symbols.size(), "symbol",
                                             &k.symbols));
    const std::vector<json::Value>* errors;
    AOTPACK_RETURN_IF_ERROR(r.array_field((*kernels)[i], path, "errors", &errors));
    for (size_t e = 0; e < errors->size(); ++e) {
      if (!(*errors)[e].is_string()) return r.error(JsonReader::join(JsonReader::join(path, "errors"), e), "expected a string");
      k.errors.push_back((*errors)[e].as_string());
    }
    plan.kernels.push_back(std::move(k));
  }
  const std::vector<json::Value>* steps;
  AOTPACK_RETURN_IF_ERROR(r.array_field(*section, "cuda", "steps", &steps));
  std::map<int64_t, size_t> index_of_id;
  for (size_t b = 0; b < program.buffers.size(); ++b) index_of_id[program.buffers[b].id] = b;
  for (size_t s = 0; s < steps->size(); ++s) {
    std::string path = JsonReader::join("cuda.steps", s);
    const json::Value& item = (*steps)[s];
    CudaStep step;
    std::string name;
    AOTPACK_RETURN_IF_ERROR(r.string_field(item, path, "kernel", &name));
    auto it = std::find_if(plan.kernels.begin(), plan.kernels.end(), [&](const CudaKernelInfo& k) { return k.name == name; });
    if (it == plan.kernels.end()) return r.error(JsonReader::join(path, "kernel"), str_cat("no kernel ", quoted(name), " in cuda.kernels"));
    step.kernel = static_cast<size_t>(it - plan.kernels.begin());
    const std::vector<json::Value>* args;
    AOTPACK_RETURN_IF_ERROR(r.array_field(item, path, "args", &args));
    for (size_t a = 0; a < args->size(); ++a) {
      std::string arg_path = JsonReader::join(JsonReader::join(path, "args"), a);
      if (!(*args)[a].is_int() || !index_of_id.count((*args)[a].as_int()))
        return r.error(arg_path, "expected the id of a buffer");
      step.args.push_back(index_of_id[(*args)[a].as_int()]);
    }
    if (step.args.empty()) return r.error(JsonReader::join(path, "args"), "a step needs at least its output buffer");
    const std::vector<json::Value>* grid;
    AOTPACK_RETURN_IF_ERROR(r.array_field(item, path, "grid", &grid));
    if (grid->size() != 3) return r.error(JsonReader::join(path, "grid"), "expected 3 expressions");
    for (size_t g = 0; g < 3; ++g) {
      AOTPACK_RETURN_IF_ERROR(parse_expr((*grid)[g], program.symbol_names, r,
                                         JsonReader::join(JsonReader::join(path, "grid"), g), &step.grid[g]));
    }
    plan.steps.push_back(std::move(step));
  }
  *out = std::move(plan);
  *present = true;
  return Status();
}

// ---- devices -------------------------------------------------------------------------------------------

CudaDevice::~CudaDevice() {
  if (!driver) return;
  if (context) driver->cuCtxSetCurrent(context);
  for (CUmodule m : modules) driver->cuModuleUnload(m);
  if (weights) driver->cuMemFree(weights);
  if (context) driver->cuDevicePrimaryCtxRelease(device);
}

Status CudaModel::device(int index, const CudaDevice** out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(index);
  if (it == devices_.end()) {
    std::unique_ptr<CudaDevice> d;
    AOTPACK_RETURN_IF_ERROR(set_up(index, &d));
    it = devices_.emplace(index, std::move(d)).first;
  }
  *out = it->second.get();
  return Status();
}

Status CudaModel::set_up(int index, std::unique_ptr<CudaDevice>* out) const {
  const Driver* d;
  AOTPACK_RETURN_IF_ERROR(driver(&d));
  int count = 0;
  AOTPACK_CUDA_CHECK(*d, cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (index < 0 || index >= count)
    return invalid_argument("CUDA device ", index, " does not exist: this host has ", count, " CUDA device",
                            count == 1 ? "" : "s");
  std::unique_ptr<CudaDevice> dev(new CudaDevice());
  dev->driver = d;
  dev->index = index;
  AOTPACK_CUDA_CHECK(*d, cuDeviceGet(&dev->device, index), "cuDeviceGet");
  char name[256] = {0};
  AOTPACK_CUDA_CHECK(*d, cuDeviceGetName(name, sizeof(name) - 1, dev->device), "cuDeviceGetName");
  int major = 0, minor = 0, smem_optin = 0;
  AOTPACK_CUDA_CHECK(*d, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev->device),
                     "cuDeviceGetAttribute(compute capability)");
  AOTPACK_CUDA_CHECK(*d, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev->device),
                     "cuDeviceGetAttribute(compute capability)");
  AOTPACK_CUDA_CHECK(*d, cuDeviceGetAttribute(&smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                              dev->device), "cuDeviceGetAttribute(shared memory)");
  const int attrs[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
  for (int g = 0; g < 3; ++g)
    AOTPACK_CUDA_CHECK(*d, cuDeviceGetAttribute(&dev->max_grid[g], attrs[g], dev->device), "cuDeviceGetAttribute(grid)");
  const int64_t cc = major * 10 + minor;
  dev->label = str_cat("CUDA device ", index, " (", name, ", compute capability ", major, ".", minor, ")");
  // Triton builds exact-architecture cubins (sm_90a for 9.0): only an exact match runs.
  if (std::find(plan_.archs.begin(), plan_.archs.end(), cc) == plan_.archs.end())
    return unsupported(dev->label, ": the package has CUDA kernels for ", archs_string(plan_.archs),
                       " only, not sm_", cc, "; export again with --cuda-arch ", cc);
  if (d->version < plan_.min_driver_version)
    return unsupported("the package's CUDA kernels (PTX ", plan_.ptx_version, ") need an NVIDIA driver for CUDA ",
                       driver_string(static_cast<int>(plan_.min_driver_version)), " or later; this driver supports CUDA ",
                       driver_string(d->version), ": update the driver");

  AOTPACK_CUDA_CHECK(*d, cuDevicePrimaryCtxRetain(&dev->context, dev->device), "cuDevicePrimaryCtxRetain");
  AOTPACK_CUDA_CHECK(*d, cuCtxSetCurrent(dev->context), "cuCtxSetCurrent");

  // cuda/sm_<cc>/kernels.json: each kernel's cubin member and launch metadata for this architecture.
  std::string meta_member = str_cat("cuda/sm_", cc, "/kernels.json");
  MemberBytes bytes;
  AOTPACK_RETURN_IF_ERROR(package_->member(meta_member, &bytes));
  json::Value meta;
  AOTPACK_RETURN_IF_ERROR(
      json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data), bytes.size), &meta).prefixed(meta_member));
  JsonReader r(meta_member);
  const std::vector<json::Value>* kernels;
  AOTPACK_RETURN_IF_ERROR(r.array_field(meta, "", "kernels", &kernels));
  dev->functions.resize(plan_.kernels.size());
  std::vector<char> found(plan_.kernels.size(), 0);
  for (size_t i = 0; i < kernels->size(); ++i) {
    std::string path = JsonReader::join("kernels", i);
    const json::Value& k = (*kernels)[i];
    std::string kname, cubin, function;
    int64_t warps, shared, global_scratch, profile_scratch;
    AOTPACK_RETURN_IF_ERROR(r.string_field(k, path, "name", &kname));
    AOTPACK_RETURN_IF_ERROR(r.string_field(k, path, "cubin", &cubin));
    AOTPACK_RETURN_IF_ERROR(r.string_field(k, path, "function", &function));
    AOTPACK_RETURN_IF_ERROR(r.int_field(k, path, "num_warps", &warps));
    AOTPACK_RETURN_IF_ERROR(r.int_field(k, path, "shared", &shared));
    AOTPACK_RETURN_IF_ERROR(r.int_field(k, path, "global_scratch_size", &global_scratch));
    AOTPACK_RETURN_IF_ERROR(r.int_field(k, path, "profile_scratch_size", &profile_scratch));
    auto it = std::find_if(plan_.kernels.begin(), plan_.kernels.end(),
                           [&](const CudaKernelInfo& info) { return info.name == kname; });
    if (it == plan_.kernels.end()) continue;  // a kernel no step uses
    size_t ki = static_cast<size_t>(it - plan_.kernels.begin());
    if (warps < 1 || warps > 32) return r.error(JsonReader::join(path, "num_warps"), "expected 1..32");
    if (shared < 0 || shared > smem_optin)
      return unsupported(dev->label, ": kernel ", kname, " needs ", shared, " bytes of shared memory, more than the ",
                         smem_optin, " this device allows");
    if (global_scratch != 0 || profile_scratch != 0)
      return unsupported(meta_member, ": kernel ", kname, " needs global scratch memory, which this runtime does not "
                         "provide yet");
    MemberBytes image;
    AOTPACK_RETURN_IF_ERROR(package_->member(cubin, &image));
    CUmodule module = nullptr;
    // The cubin is read in place from the package mapping: no temporary file.
    AOTPACK_RETURN_IF_ERROR(check(*d, d->cuModuleLoadData(&module, image.data), str_cat("cuModuleLoadData(", cubin, ")").c_str()));
    dev->modules.push_back(module);
    CudaDevice::Function& f = dev->functions[ki];
    AOTPACK_RETURN_IF_ERROR(check(*d, d->cuModuleGetFunction(&f.fn, module, function.c_str()),
                                  str_cat("cuModuleGetFunction(", cubin, ", ", function, ")").c_str()));
    if (shared > 48 * 1024)
      AOTPACK_RETURN_IF_ERROR(check(*d, d->cuFuncSetAttribute(f.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                              static_cast<int>(shared)),
                                    str_cat("cuFuncSetAttribute(", kname, ", shared memory)").c_str()));
    f.threads = static_cast<unsigned int>(warps * 32);
    f.shared = static_cast<unsigned int>(shared);
    found[ki] = 1;
  }
  for (size_t i = 0; i < found.size(); ++i) {
    if (!found[i]) return data_loss(meta_member, ": no cubin for kernel ", quoted(plan_.kernels[i].name));
  }

  // Weights: one allocation, each tensor at a 256-byte aligned offset, copied once.
  int64_t total = 0;
  dev->weight_ptrs.assign(program_->buffers.size(), 0);
  std::vector<int64_t> offsets(program_->buffers.size(), 0);
  for (size_t b = 0; b < program_->buffers.size(); ++b) {
    const Buffer& buf = program_->buffers[b];
    if (buf.kind != BufferKind::kWeight) continue;
    int64_t n = static_cast<int64_t>(dtype_size(buf.dtype));
    for (const Expr& e : buf.shape) n *= e.value;
    offsets[b] = total;
    total += align_up(std::max<int64_t>(n, 1), kDeviceAlignment);
  }
  if (total > 0) {
    AOTPACK_RETURN_IF_ERROR(check(*d, d->cuMemAlloc(&dev->weights, static_cast<size_t>(total)),
                                  str_cat("cuMemAlloc(", total, " bytes of weights)").c_str()));
  }
  for (size_t b = 0; b < program_->buffers.size(); ++b) {
    const Buffer& buf = program_->buffers[b];
    if (buf.kind != BufferKind::kWeight) continue;
    uint64_t n = dtype_size(buf.dtype);
    for (const Expr& e : buf.shape) n *= static_cast<uint64_t>(e.value);
    dev->weight_ptrs[b] = dev->weights + static_cast<CUdeviceptr>(offsets[b]);
    if (n > 0)
      AOTPACK_RETURN_IF_ERROR(check(*d, d->cuMemcpyHtoD(dev->weight_ptrs[b], (*weight_data_)[b], n),
                                    str_cat("uploading weight buffer ", buf.id, " to ", dev->label).c_str()));
  }
  *out = std::move(dev);
  return Status();
}

// ---- sessions ------------------------------------------------------------------------------------------

CudaSession::~CudaSession() {
  if (!device_) return;
  const Driver& d = *device_->driver;
  d.cuCtxSetCurrent(device_->context);
  if (stream_) d.cuStreamDestroy(stream_);
  for (CUdeviceptr p : allocations_) d.cuMemFree(p);
}

Status CudaSession::alloc(size_t bytes, CUdeviceptr* out) {
  const Driver& d = *device_->driver;
  AOTPACK_RETURN_IF_ERROR(check(d, d.cuMemAlloc(out, std::max<size_t>(bytes, kDeviceAlignment)),
                                str_cat("cuMemAlloc(", bytes, " bytes) on ", device_->label).c_str()));
  allocations_.push_back(*out);
  return Status();
}

Status CudaSession::bytes_of(const Buffer& b, const int64_t* symbols, uint64_t* out) const {
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

Status CudaSession::create(const CudaModel& model, const Program& program, int device_index, bool device_io,
                           std::unique_ptr<CudaSession>* out) {
  std::unique_ptr<CudaSession> s(new CudaSession());
  s->model_ = &model;
  s->program_ = &program;
  s->device_io_ = device_io;
  AOTPACK_RETURN_IF_ERROR(model.device(device_index, &s->device_));
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
  AOTPACK_RETURN_IF_ERROR(s->alloc(sizeof(int32_t) * std::max<size_t>(model.plan().steps.size(), 1), &s->error_flags_));
  s->prepare_launches();
  *out = std::move(s);
  return Status();
}

// Builds each step's parameter array once, so a run only updates symbol values (and device inputs).
void CudaSession::prepare_launches() {
  const CudaPlan& plan = model_->plan();
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

Status CudaSession::run(const std::vector<const void*>& inputs, const int64_t* symbols,
                        const std::vector<void*>& host_outputs) {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  AOTPACK_CUDA_CHECK(d, cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
  if (device_io_) {
    AOTPACK_RETURN_IF_ERROR(bind_device_inputs(inputs, symbols));
  } else {
    AOTPACK_RETURN_IF_ERROR(copy_inputs(inputs, symbols));
  }
  AOTPACK_RETURN_IF_ERROR(launch_steps(symbols));
  if (!device_io_) AOTPACK_RETURN_IF_ERROR(copy_outputs(host_outputs, symbols));
  return finish();
}

Status CudaSession::copy_inputs(const std::vector<const void*>& host_inputs, const int64_t* symbols) {
  const Driver& d = *device_->driver;
  for (size_t i = 0; i < program_->inputs.size(); ++i) {
    size_t b = program_->inputs[i].buffer;
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[b], symbols, &bytes));
    if (bytes > 0)
      AOTPACK_RETURN_IF_ERROR(check(d, d.cuMemcpyHtoDAsync(buffer_ptrs_[b], host_inputs[i], bytes, stream_),
                                    str_cat("copying input ", quoted(program_->inputs[i].name), " to ", device_->label).c_str()));
  }
  return Status();
}

// Checks every input's pointer before binding any, so a failed run leaves no launch pointing at memory
// that was refused.
Status CudaSession::bind_device_inputs(const std::vector<const void*>& inputs, const int64_t* symbols) {
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
Status CudaSession::check_device_input(size_t i, CUdeviceptr p, uint64_t bytes) const {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  const std::string what = str_cat("input ", quoted(program_->inputs[i].name), ": device pointer ",
                                   reinterpret_cast<const void*>(p));
  if (p % kKernelAlignment != 0)
    return invalid_argument(what, " is not ", kKernelAlignment, "-byte aligned, which the CUDA kernels assume; "
                            "pass the start of an allocation or an aligned offset into one (copy a view that is not)");
  PointerAttributes attributes;
  Status st = pointer_attributes(d, p, &attributes);
  if (!st.ok()) return st.prefixed(what);
  return check_device_memory(attributes, p, bytes, dev.index, dev.context, what, dev.label);
}

Status CudaSession::launch_steps(const int64_t* symbols) {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  const CudaPlan& plan = model_->plan();
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

Status CudaSession::copy_outputs(const std::vector<void*>& host_outputs, const int64_t* symbols) {
  const Driver& d = *device_->driver;
  for (size_t i = 0; i < program_->outputs.size(); ++i) {
    size_t b = program_->outputs[i].buffer;
    uint64_t bytes = 0;
    AOTPACK_RETURN_IF_ERROR(bytes_of(program_->buffers[b], symbols, &bytes));
    if (bytes > 0)
      AOTPACK_RETURN_IF_ERROR(check(d, d.cuMemcpyDtoHAsync(host_outputs[i], buffer_ptrs_[b], bytes, stream_),
                                    str_cat("copying output ", quoted(program_->outputs[i].name), " from ", device_->label).c_str()));
  }
  return Status();
}

// Reads the error flags back, waits for the stream and reports the first step whose check failed.
Status CudaSession::finish() {
  const CudaDevice& dev = *device_;
  const Driver& d = *dev.driver;
  const CudaPlan& plan = model_->plan();
  if (!plan.steps.empty())
    AOTPACK_CUDA_CHECK(d, cuMemcpyDtoHAsync(host_flags_.data(), error_flags_, sizeof(int32_t) * plan.steps.size(), stream_),
                       "reading the error flags");
  AOTPACK_RETURN_IF_ERROR(check(d, d.cuStreamSynchronize(stream_), str_cat("running the model on ", dev.label).c_str()));
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
