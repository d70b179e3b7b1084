#include "model.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend_registry.hpp"
#include "dtype.hpp"
#include "json_reader.hpp"
#include "sha256.hpp"

using namespace aotpack;

namespace {

bool same_expr(const Expr& a, const Expr& b) {
  if (a.op != b.op || a.value != b.value || a.args.size() != b.args.size()) return false;
  for (size_t i = 0; i < a.args.size(); ++i) {
    if (!same_expr(a.args[i], b.args[i])) return false;
  }
  return true;
}

std::string shape_string(const std::vector<Expr>& shape, const std::vector<std::string>& symbols) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + expr_to_string(shape[i], symbols);
  return s + "]";
}

}  // namespace

Status aotpack_model::load(const std::string& path, bool verify_digests, const RequiredSignature* signature,
                           std::unique_ptr<aotpack_model>* out) {
  std::unique_ptr<aotpack_model> model(new aotpack_model());
  model->shared_ = std::make_shared<Shared>();
  AOTPACK_RETURN_IF_ERROR(model->load_impl(path, verify_digests, signature).prefixed("package " + path));
  model->weights_ = model->shared_->own_weights;
  *out = std::move(model);
  return Status();
}

Status aotpack_model::load_impl(const std::string& path, bool verify_digests, const RequiredSignature* signature) {
  Shared& s = *shared_;
  AOTPACK_RETURN_IF_ERROR(s.package.open(path, verify_digests, signature));
  auto weights = std::make_shared<Weights>();
  MemberBytes bytes;
  AOTPACK_RETURN_IF_ERROR(s.package.member(kWeightsMember, &bytes));
  AOTPACK_RETURN_IF_ERROR(safetensors::parse(bytes.data, bytes.size, &weights->tensors)
                              .prefixed(std::string("member ") + kWeightsMember));
  // The manifest's record of the member (Package::open checked it is there, and, unless disabled, that it
  // is the member's sha256).
  const json::Value* members = s.package.manifest().find("members");
  const json::Value* entry = members ? members->find(kWeightsMember) : nullptr;
  const json::Value* sha = entry ? entry->find("sha256") : nullptr;
  if (!sha || !sha->is_string())
    return data_loss("manifest.json \"members\" has no sha256 for ", kWeightsMember);
  weights->digest = "sha256:" + sha->as_string();
  MemberBytes program_bytes;
  AOTPACK_RETURN_IF_ERROR(s.package.member(kProgramMember, &program_bytes));
  json::Value program_doc;
  AOTPACK_RETURN_IF_ERROR(
      json::parse(std::string_view(reinterpret_cast<const char*>(program_bytes.data), program_bytes.size), &program_doc)
          .prefixed(kProgramMember));
  AOTPACK_RETURN_IF_ERROR(parse_program(program_doc, weights->tensors, &s.program));
  AOTPACK_RETURN_IF_ERROR(check_signature());
  place_weights(s.program, weights.get());
  s.own_weights = std::move(weights);
  AOTPACK_RETURN_IF_ERROR(load_targets(program_doc));
  build_infos();
  return Status();
}

// The manifest's signature is what users and tools read; it must say what program.json does.
Status aotpack_model::check_signature() const {
  JsonReader r("manifest.json");
  const json::Value* sig;
  const std::vector<json::Value>* symbols;
  const Program& program_ = shared_->program;
  AOTPACK_RETURN_IF_ERROR(r.object_field(shared_->package.manifest(), "", "signature", &sig));
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
void aotpack_model::place_weights(const Program& program, Weights* weights) {
  weights->data.assign(program.buffers.size(), nullptr);
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    if (b.kind != BufferKind::kWeight) continue;
    const safetensors::TensorView& t = weights->tensors[b.weight];
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
      std::unique_ptr<uint8_t[]> copy(new uint8_t[t.size + 64]);
      uint8_t* p = copy.get() + (64 - reinterpret_cast<uintptr_t>(copy.get()) % 64) % 64;
      std::memcpy(p, t.data, t.size);
      weights->data[i] = p;
      weights->copies.push_back(std::move(copy));
    } else {
      weights->data[i] = t.data;
    }
  }
}

// Each backend loads its part of the package. The package loads when one of them can run here; a failure its
// backend does not tolerate fails the load even so (a damaged CPU library does, a CUDA part this runtime
// cannot read does not: a CUDA session then says why). When none loads, the load fails with the last
// failure in registry order (the CPU's first: a CUDA-only package reports its CUDA part).
Status aotpack_model::load_targets(const json::Value& program_doc) {
  Shared& s = *shared_;
  const PackageParts parts{&s.package, &program_doc, &s.program, &s.own_weights->data};
  Status last_failure, intolerable;
  bool any_loaded = false;
  s.targets.resize(num_backends());
  for (size_t i = 0; i < num_backends(); ++i) {
    const Backend& b = backend(i);
    Target& t = s.targets[i];
    t.why_not = b.load(parts, &t.executable);
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
  const Target& t = shared_->targets[backend_index];
  *why = t.why_not;
  return t.executable.get();
}

Status aotpack_model::create_workspace(const Executable& executable, const WorkspaceOptions& options,
                                       std::unique_ptr<Workspace>* out) const {
  if (!refitted()) return executable.create_workspace(options, out);
  return executable.create_workspace_with_weights(options, weights_->data, out);
}

Status aotpack_model::refit(const aotpack_model& base, const uint8_t* data, size_t size,
                            std::unique_ptr<aotpack_model>* out) {
  const Shared& s = *base.shared_;
  if (size > SIZE_MAX - 64) return invalid_argument("the new weights' size ", size, " is too large");
  auto weights = std::make_shared<Weights>();
  // The copy is 64-byte aligned, so tensors the file aligns are used in place, as in a package.
  weights->bytes.reset(new uint8_t[size + 64]);
  uint8_t* copy = weights->bytes.get() + (64 - reinterpret_cast<uintptr_t>(weights->bytes.get()) % 64) % 64;
  if (size) std::memcpy(copy, data, size);
  AOTPACK_RETURN_IF_ERROR(safetensors::parse(copy, size, &weights->tensors).prefixed("the new weights"));
  // The same names, dtypes and shapes as the package's, every difference listed (as `aotpack refit` does).
  const std::vector<safetensors::TensorView>& expected = s.own_weights->tensors;
  auto describe = [](const safetensors::TensorView& t) {
    std::string d = str_cat(dtype_name(t.dtype), "[");
    for (size_t i = 0; i < t.shape.size(); ++i) d += str_cat(i ? ", " : "", t.shape[i]);
    return d + "]";
  };
  auto find = [](const std::vector<safetensors::TensorView>& ts, const std::string& name) -> const safetensors::TensorView* {
    for (const safetensors::TensorView& t : ts) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  std::vector<std::string> expected_names, given_names;
  for (const auto& t : expected) expected_names.push_back(t.name);
  for (const auto& t : weights->tensors) given_names.push_back(t.name);
  std::sort(expected_names.begin(), expected_names.end());
  std::sort(given_names.begin(), given_names.end());
  std::vector<std::string> problems;
  for (const std::string& n : expected_names) {
    if (!find(weights->tensors, n)) problems.push_back(str_cat(n, ": missing (expected ", describe(*find(expected, n)), ")"));
  }
  for (const std::string& n : given_names) {
    if (!find(expected, n)) problems.push_back(str_cat(n, ": not in the package (given ", describe(*find(weights->tensors, n)), ")"));
  }
  for (const std::string& n : expected_names) {
    const safetensors::TensorView* e = find(expected, n);
    const safetensors::TensorView* g = find(weights->tensors, n);
    if (!g) continue;
    if (e->dtype != g->dtype) problems.push_back(str_cat(n, ": dtype ", dtype_name(g->dtype), ", expected ", dtype_name(e->dtype)));
    if (e->shape != g->shape) {
      std::string ds = describe(*g), de = describe(*e);
      problems.push_back(str_cat(n, ": shape ", ds.substr(ds.find('[')), ", expected ", de.substr(de.find('['))));
    }
  }
  if (!problems.empty()) {
    std::string list;
    for (const std::string& p : problems) list += "\n  " + p;
    // As `aotpack refit` hints: a name the package lacks, where export laid weights out for the kernels.
    bool panels = false, unknown = false;
    for (const std::string& n : expected_names) panels = panels || n.find(".panels") != std::string::npos;
    for (const std::string& n : given_names) unknown = unknown || !find(expected, n);
    panels = panels && unknown;
    return invalid_argument("the new weights do not fit the package: ", problems.size(),
                            " mismatch(es) with its weights.safetensors:", list,
                            panels ? "\n  (some package weights are laid out at export, e.g. *.panels16: pass the "
                                     "weights.safetensors that `aotpack refit --model` writes)"
                                   : "");
  }
  // parse_program bound each weight buffer to a tensor by its index in the package's weights: the refit's
  // tensors go in the same order.
  std::vector<safetensors::TensorView> ordered;
  ordered.reserve(expected.size());
  for (const auto& t : expected) ordered.push_back(*find(weights->tensors, t.name));
  weights->tensors = std::move(ordered);
  weights->digest = "sha256:" + sha256_hex(copy, size);
  place_weights(s.program, weights.get());
  std::unique_ptr<aotpack_model> model(new aotpack_model());
  model->shared_ = base.shared_;
  model->weights_ = std::move(weights);
  *out = std::move(model);
  return Status();
}

void aotpack_model::build_infos() {
  const Program& program_ = shared_->program;
  std::vector<aotpack_tensor_info_t>& input_infos_ = shared_->input_infos;
  std::vector<aotpack_tensor_info_t>& output_infos_ = shared_->output_infos;
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
