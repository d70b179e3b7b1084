#include "model.hpp"

#include <cstdint>
#include <cstring>
#include <map>

#include "backend_registry.hpp"
#include "dtype.hpp"
#include "json_reader.hpp"
#include "plan_check.hpp"
#include "sha256.hpp"
#include "timing.hpp"

using namespace aotpack;

namespace {

std::string shape_string(const std::vector<Expr>& shape, const std::vector<std::string>& symbols) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + expr_to_string(shape[i], symbols);
  return s + "]";
}

}  // namespace

Status aotpack_model::load(const std::string& path, const LoadOptions& options, std::unique_ptr<aotpack_model>* out) {
  std::unique_ptr<aotpack_model> model(new aotpack_model());
  AOTPACK_RETURN_IF_ERROR(model->load_impl(path, options).prefixed("package " + path));
  *out = std::move(model);
  return Status();
}

// The package's digests are checked on background threads while the rest loads (Package): a member is used only
// once its digest matched, except the weights, which are parsed by a validating reader and may be uploaded to a
// prepared device meanwhile. The load succeeds only when every digest matched; a mismatch is reported before
// any other failure, which it would explain.
Status aotpack_model::load_impl(const std::string& path, const LoadOptions& options) {
  PartTimer total("model load");
  AOTPACK_RETURN_IF_ERROR(package_.open(path, options.verify_digests, options.signature));
  Status loaded = load_parts(options);
  Status digests = package_.wait_for_digests();
  AOTPACK_RETURN_IF_ERROR(digests);
  return loaded;
}

Status aotpack_model::load_parts(const LoadOptions& options) {
  PartTimer parse("program and weights header");
  AOTPACK_RETURN_IF_ERROR(load_weights());
  MemberBytes program_bytes;
  AOTPACK_RETURN_IF_ERROR(package_.member(kProgramMember, &program_bytes));
  json::Value program_doc;
  AOTPACK_RETURN_IF_ERROR(
      json::parse(std::string_view(reinterpret_cast<const char*>(program_bytes.data), program_bytes.size), &program_doc)
          .prefixed(kProgramMember));
  AOTPACK_RETURN_IF_ERROR(parse_program(program_doc, weights_, &program_));
  AOTPACK_RETURN_IF_ERROR(check_plan_memory(program_));
  AOTPACK_RETURN_IF_ERROR(check_signature());
  place_weights();
  parse.stop();
  AOTPACK_RETURN_IF_ERROR(load_targets(program_doc));
  build_infos();
  prepare(options);
  return Status();
}

// The device set up now rather than at the first session; a failure here is the session's to report (it
// tries again and says why), so it is not the load's.
void aotpack_model::prepare(const LoadOptions& options) const {
  if (options.prepare_device_type < 0) return;
  size_t index = 0;
  if (!find_backend(options.prepare_device_type, &index)) return;
  Status why;
  const Executable* executable = this->executable(index, &why);
  if (!executable) return;
  PartTimer timer("preparing the device during the load");
  Status st = executable->prepare(options.prepare_device_index);
  if (timings_enabled()) timer.stop(st.ok() ? std::string(backend(index).kind) : st.message());
}

Status aotpack_model::load_weights() {
  MemberBytes bytes;
  // Parsed before its digest is checked (the header is validated as it is read); wait_for_digests follows.
  AOTPACK_RETURN_IF_ERROR(package_.member_unverified(kWeightsMember, &bytes));
  AOTPACK_RETURN_IF_ERROR(
      safetensors::parse(bytes.data, bytes.size, &weights_).prefixed(std::string("member ") + kWeightsMember));
  // The manifest's record of the member (Package::open checked it is there; the load fails unless it matches,
  // when digests are verified).
  const json::Value* members = package_.manifest().find("members");
  const json::Value* entry = members ? members->find(kWeightsMember) : nullptr;
  const json::Value* sha = entry ? entry->find("sha256") : nullptr;
  if (!sha || !sha->is_string()) return data_loss("manifest.json \"members\" has no sha256 for ", kWeightsMember);
  weights_digest_ = "sha256:" + sha->as_string();
  return Status();
}

// The manifest's signature is what users and tools read; it must say what program.json does.
Status aotpack_model::check_signature() const {
  JsonReader r("manifest.json");
  const json::Value* sig;
  const std::vector<json::Value>* symbols;
  AOTPACK_RETURN_IF_ERROR(r.object_field(package_.manifest(), "", "signature", &sig));
  AOTPACK_RETURN_IF_ERROR(r.array_field(*sig, "signature", "symbols", &symbols));
  auto mismatch = [](const std::string& what) {
    return data_loss("manifest.json signature disagrees with program.json: ", what);
  };
  if (symbols->size() != program_.symbols.size())
    return mismatch(str_cat(symbols->size(), " symbols in the manifest, ", program_.symbols.size(), " in the program"));
  for (size_t i = 0; i < symbols->size(); ++i) {
    std::string path = JsonReader::join("signature.symbols", i);
    std::string name;
    int64_t min, max;
    AOTPACK_RETURN_IF_ERROR(r.string_field((*symbols)[i], path, "name", &name));
    AOTPACK_RETURN_IF_ERROR(r.int_field((*symbols)[i], path, "min", &min));
    AOTPACK_RETURN_IF_ERROR(r.int_field((*symbols)[i], path, "max", &max));
    const Symbol& s = program_.symbols[i];
    if (name != s.name || min != s.min || max != s.max)
      return mismatch(str_cat("symbol ", i, " is ", quoted(name), " ", min, "..", max, " in the manifest, ",
                              quoted(s.name), " ", s.min, "..", s.max, " in the program"));
  }
  const char* kinds[] = {"inputs", "outputs"};
  for (const char* kind : kinds) {
    const std::vector<Port>& ports = std::strcmp(kind, "inputs") == 0 ? program_.inputs : program_.outputs;
    const std::vector<json::Value>* items;
    AOTPACK_RETURN_IF_ERROR(r.array_field(*sig, "signature", kind, &items));
    if (items->size() != ports.size())
      return mismatch(str_cat(items->size(), " ", kind, " in the manifest, ", ports.size(), " in the program"));
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = JsonReader::join(JsonReader::join("signature", kind), i);
      std::string name, dtype;
      const std::vector<json::Value>* dims;
      AOTPACK_RETURN_IF_ERROR(r.string_field((*items)[i], path, "name", &name));
      AOTPACK_RETURN_IF_ERROR(r.string_field((*items)[i], path, "dtype", &dtype));
      AOTPACK_RETURN_IF_ERROR(r.array_field((*items)[i], path, "shape", &dims));
      std::vector<Expr> shape(dims->size());
      for (size_t d = 0; d < dims->size(); ++d) {
        AOTPACK_RETURN_IF_ERROR(parse_expr((*dims)[d], program_.symbol_names, r,
                                           JsonReader::join(JsonReader::join(path, "shape"), d), &shape[d]));
      }
      const Buffer& b = program_.buffers[ports[i].buffer];
      bool same = name == ports[i].name && dtype == dtype_name(b.dtype) && shape.size() == b.shape.size();
      for (size_t d = 0; same && d < shape.size(); ++d) same = same_expr(shape[d], b.shape[d]);
      if (!same)
        return mismatch(str_cat(kind, "[", i, "] is ", quoted(name), " ", dtype, " ",
                                shape_string(shape, program_.symbol_names), " in the manifest, ", quoted(ports[i].name),
                                " ", dtype_name(b.dtype), " ", shape_string(b.shape, program_.symbol_names),
                                " in the program"));
    }
  }
  return Status();
}

// Kernels may load elements with aligned instructions; a tensor the file leaves misaligned is copied.
void aotpack_model::place_weights() {
  const Program& program_ = root().program_;
  weight_data_.assign(program_.buffers.size(), nullptr);
  for (size_t i = 0; i < program_.buffers.size(); ++i) {
    const Buffer& b = program_.buffers[i];
    if (b.kind != BufferKind::kWeight) continue;
    const safetensors::TensorView& t = weights_[b.weight];
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
      std::unique_ptr<uint8_t[]> copy(new uint8_t[t.size + 64]);
      uint8_t* p = copy.get() + (64 - reinterpret_cast<uintptr_t>(copy.get()) % 64) % 64;
      std::memcpy(p, t.data, t.size);
      weight_data_[i] = p;
      weight_copies_.push_back(std::move(copy));
    } else {
      weight_data_[i] = t.data;
    }
  }
}

// Each backend loads its part of the package. The package loads when one of them can run here; a failure its
// backend does not tolerate fails the load even so (a damaged CPU library does, a CUDA part this runtime
// cannot read does not: a CUDA session then says why). When none loads, the load fails with the last
// failure in registry order (the CPU's first: a CUDA-only package reports its CUDA part).
Status aotpack_model::load_targets(const json::Value& program_doc) {
  const PackageParts parts{&package_, &program_doc, &program_, &weight_data_};
  Status last_failure, intolerable;
  bool any_loaded = false;
  targets_.resize(num_backends());
  for (size_t i = 0; i < num_backends(); ++i) {
    const Backend& b = backend(i);
    Target& t = targets_[i];
    PartTimer timer("backend load");
    t.why_not = b.load(parts, &t.executable);
    if (timings_enabled()) timer.stop(b.kind);
    if (t.executable) {
      t.why_not = Status();
      any_loaded = true;
    } else if (!t.why_not.ok()) {
      last_failure = t.why_not;
      if (intolerable.ok() && !b.load_failure_is_tolerable(t.why_not)) intolerable = t.why_not;
    }
  }
  if (!any_loaded && !last_failure.ok()) return last_failure;
  if (!any_loaded) {  // every backend found no target of its kind (the CPU's reports that as a failure)
    std::string kinds;
    for (size_t i = 0; i < num_backends(); ++i) kinds += str_cat(i ? ", " : "", backend(i).kind);
    return unsupported("manifest.json \"targets\" has no target this runtime runs (", kinds, ")");
  }
  return intolerable;
}

const Executable* aotpack_model::executable(size_t backend_index, Status* why) const {
  const Target& t = root().targets_[backend_index];
  *why = t.why_not;
  return t.executable.get();
}

aotpack_model::~aotpack_model() {
  if (base_) base_->release();
}

Status aotpack_model::create_workspace(const Executable& executable, const WorkspaceOptions& options,
                                       std::unique_ptr<Workspace>* out) const {
  if (!base_) return executable.create_workspace(options, out);
  return executable.create_workspace_with_weights(options, weight_data_, out);
}

Status aotpack_model::refit(const aotpack_model& base_model, const uint8_t* data, size_t size,
                            std::unique_ptr<aotpack_model>* out) {
  const aotpack_model& base = base_model.root();
  if (size > SIZE_MAX - 64) return invalid_argument("the new weights' size ", size, " is too large");
  std::unique_ptr<aotpack_model> model(new aotpack_model());
  // The copy is 64-byte aligned, so tensors the file aligns are used in place, as in a package.
  model->refit_bytes_.reset(new uint8_t[size + 64]);
  uint8_t* copy = model->refit_bytes_.get() + (64 - reinterpret_cast<uintptr_t>(model->refit_bytes_.get()) % 64) % 64;
  if (size) std::memcpy(copy, data, size);
  std::vector<safetensors::TensorView> given;
  AOTPACK_RETURN_IF_ERROR(safetensors::parse(copy, size, &given).prefixed("the new weights"));
  // The same names, dtypes and shapes as the package's, every difference listed (as `aotpack refit` does).
  const std::vector<safetensors::TensorView>& expected = base.weights_;
  auto describe = [](const safetensors::TensorView& t) {
    std::string d = str_cat(dtype_name(t.dtype), "[");
    for (size_t i = 0; i < t.shape.size(); ++i) d += str_cat(i ? ", " : "", t.shape[i]);
    return d + "]";
  };
  auto dims = [&](const safetensors::TensorView& t) {
    std::string d = describe(t);
    return d.substr(d.find('['));
  };
  std::map<std::string, const safetensors::TensorView*> by_name_expected, by_name_given;
  for (const auto& t : expected) by_name_expected[t.name] = &t;
  for (const auto& t : given) by_name_given[t.name] = &t;
  std::vector<std::string> problems;
  for (const auto& [n, e] : by_name_expected) {
    if (!by_name_given.count(n)) problems.push_back(str_cat(n, ": missing (expected ", describe(*e), ")"));
  }
  bool unknown = false, panels = false;
  for (const auto& [n, g] : by_name_given) {
    if (!by_name_expected.count(n)) {
      problems.push_back(str_cat(n, ": not in the package (given ", describe(*g), ")"));
      unknown = true;
    }
  }
  for (const auto& [n, e] : by_name_expected) {
    panels = panels || n.find(".panels") != std::string::npos;
    auto it = by_name_given.find(n);
    if (it == by_name_given.end()) continue;
    const safetensors::TensorView* g = it->second;
    if (e->dtype != g->dtype) problems.push_back(str_cat(n, ": dtype ", dtype_name(g->dtype), ", expected ", dtype_name(e->dtype)));
    if (e->shape != g->shape) problems.push_back(str_cat(n, ": shape ", dims(*g), ", expected ", dims(*e)));
  }
  if (!problems.empty()) {
    std::string list;
    for (const std::string& p : problems) list += "\n  " + p;
    // As `aotpack refit` hints: a name the package lacks, where export laid weights out for the kernels.
    return invalid_argument("the new weights do not fit the package: ", problems.size(),
                            " mismatch(es) with its weights.safetensors:", list,
                            panels && unknown ? "\n  (some package weights are laid out at export, e.g. *.panels16: "
                                                "pass the weights.safetensors that `aotpack refit --model` writes)"
                                              : "");
  }
  // parse_program bound each weight buffer to a tensor by its index in the package's weights: the refit's
  // tensors go in the same order.
  model->weights_.reserve(expected.size());
  for (const auto& t : expected) model->weights_.push_back(*by_name_given[t.name]);
  model->weights_digest_ = "sha256:" + sha256_hex(copy, size);
  model->base_ = &base;
  base.retain();
  model->place_weights();
  *out = std::move(model);
  return Status();
}

void aotpack_model::build_infos() {
  auto info_of = [&](const Port& port) {
    aotpack_tensor_info_t info;
    std::memset(&info, 0, sizeof(info));
    const Buffer& b = program_.buffers[port.buffer];
    info.name = port.name.c_str();
    info.dtype = b.dtype;
    info.rank = static_cast<int32_t>(b.shape.size());
    for (size_t d = 0; d < b.shape.size(); ++d) {
      aotpack_dim_info_t& dim = info.dims[d];
      const Expr& e = b.shape[d];
      if (e.is_const()) {
        dim = {e.value, nullptr, e.value, e.value};
      } else if (e.is_symbol()) {
        const Symbol& s = program_.symbols[e.value];
        dim = {-1, s.name.c_str(), s.min, s.max};
      } else {
        dim = {-1, nullptr, -1, -1};
      }
    }
    return info;
  };
  for (const Port& p : program_.inputs) input_infos_.push_back(info_of(p));
  for (const Port& p : program_.outputs) output_infos_.push_back(info_of(p));
}
