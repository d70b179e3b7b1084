#include "cuda_executable.hpp"

#include <algorithm>

#include "cuda_weight_upload.hpp"
#include "cuda_workspace.hpp"
#include "dtype.hpp"
#include "elf_image.hpp"
#include "json_reader.hpp"
#include "timing.hpp"

namespace aotpack {

using namespace cuda;

namespace {

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

std::string archs_string(const std::vector<int64_t>& archs) {
  std::string s;
  for (size_t i = 0; i < archs.size(); ++i) s += str_cat(i ? ", " : "", "sm_", archs[i]);
  return s;
}

std::string driver_string(int version) { return str_cat(version / 1000, ".", version % 1000 / 10); }

}  // namespace

Status CudaExecutable::load(const PackageParts& parts, std::unique_ptr<Executable>* out) {
  bool present = false;
  CudaPlan plan;
  AOTPACK_RETURN_IF_ERROR(parse_cuda_plan(parts.package->manifest(), *parts.program_doc, *parts.program, &present,
                                          &plan));
  if (present) out->reset(new CudaExecutable(parts.package, parts.program, parts.weight_data, std::move(plan)));
  return Status();
}

Status CudaExecutable::create_workspace(const WorkspaceOptions& options, std::unique_ptr<Workspace>* out) const {
  return CudaWorkspace::create(*this, options, out);
}

CudaDevice::~CudaDevice() {
  if (!driver) return;
  if (context) driver->cuCtxSetCurrent(context);
  for (CUmodule m : modules) driver->cuModuleUnload(m);
  if (weights) driver->cuMemFree(weights);
  if (context) driver->cuDevicePrimaryCtxRelease(device);
}

Status CudaExecutable::device(int index, const CudaDevice** out) const {
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

Status CudaExecutable::set_up(int index, std::unique_ptr<CudaDevice>* out) const {
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

  PartTimer context_timer("cuda context (cuDevicePrimaryCtxRetain; fast where the process has one already)");
  AOTPACK_CUDA_CHECK(*d, cuDevicePrimaryCtxRetain(&dev->context, dev->device), "cuDevicePrimaryCtxRetain");
  AOTPACK_CUDA_CHECK(*d, cuCtxSetCurrent(dev->context), "cuCtxSetCurrent");
  context_timer.stop();
  PartTimer modules_timer("cuda modules (kernels.json, cuModuleLoadData)");

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
    // Profile scratch is Triton's instrumentation (proton), which a package never asks for.
    if (profile_scratch != 0)
      return unsupported(meta_member, ": kernel ", kname, " needs profile scratch memory (Triton instrumentation), "
                         "which this runtime does not provide; export again without instrumentation");
    // "global_scratch_align" (optional: packages before it had no scratch): each program's region starts at
    // a multiple of global_scratch_size from an allocation aligned to 256 bytes, so the size must keep it.
    int64_t scratch_align = 1;
    if (k.find("global_scratch_align"))
      AOTPACK_RETURN_IF_ERROR(r.int_field(k, path, "global_scratch_align", &scratch_align));
    if (global_scratch < 0 || global_scratch > (int64_t{1} << 20))
      return r.error(JsonReader::join(path, "global_scratch_size"), "expected 0..1048576 bytes");
    if (scratch_align < 1 || scratch_align > 256 || (scratch_align & (scratch_align - 1)) != 0 ||
        global_scratch % scratch_align != 0)
      return r.error(JsonReader::join(path, "global_scratch_align"),
                     "expected a power of two up to 256 that divides global_scratch_size");
    MemberBytes image;
    AOTPACK_RETURN_IF_ERROR(package_->member(cubin, &image));
    AOTPACK_RETURN_IF_ERROR(check_elf_image(cubin, cuda_cubin(), image.data, image.size));
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
    f.scratch_bytes = global_scratch;
    // "pdl" (optional, false when absent: packages before it): the kernel begins with griddepcontrol.wait.
    if (const json::Value* pdl = k.find("pdl")) {
      if (!pdl->is_bool()) return r.error(JsonReader::join(path, "pdl"), "expected true or false");
      f.programmatic = pdl->as_bool() && cc >= 90 && d->cuLaunchKernelEx != nullptr;
    }
    found[ki] = 1;
  }
  for (size_t i = 0; i < found.size(); ++i) {
    if (!found[i]) return data_loss(meta_member, ": no cubin for kernel ", quoted(plan_.kernels[i].name));
  }

  if (timings_enabled()) modules_timer.stop(str_cat(dev->modules.size(), " cubins"));

  // Weights: one allocation, each tensor at a 256-byte aligned offset, copied once from the mapped package
  // through page-locked staging (cuda_weight_upload.hpp), while the digests are still being checked when the
  // device is prepared during the load (the load fails afterwards if one does not match).
  PartTimer weights_timer("cuda weights upload (cuMemAlloc, copies from the mapped file)");
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
  std::vector<WeightCopy> copies;
  for (size_t b = 0; b < program_->buffers.size(); ++b) {
    const Buffer& buf = program_->buffers[b];
    if (buf.kind != BufferKind::kWeight) continue;
    uint64_t n = dtype_size(buf.dtype);
    for (const Expr& e : buf.shape) n *= static_cast<uint64_t>(e.value);
    dev->weight_ptrs[b] = dev->weights + static_cast<CUdeviceptr>(offsets[b]);
    copies.push_back({dev->weight_ptrs[b], (*weight_data_)[b], n, buf.id});
  }
  std::string how;
  AOTPACK_RETURN_IF_ERROR(upload_weights(*d, copies, dev->label, &how));
  if (timings_enabled()) {
    const double ms = weights_timer.ms();
    weights_timer.stop(str_cat(total / 1000000.0, " MB, ", total / 1000.0 / std::max(ms, 1e-3), " MB/s, ", how));
  }
  *out = std::move(dev);
  return Status();
}

}  // namespace aotpack
