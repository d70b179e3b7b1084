#include "cuda_plan.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "json_reader.hpp"
#include "plan_check.hpp"

namespace aotpack {

namespace {

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

std::string name_of(const CudaPlan& plan, const CudaStep& step) { return plan.kernels[step.kernel].name; }

Status find_kernel(const JsonReader& r, const CudaPlan& plan, const json::Value& item, const std::string& path,
                   size_t* out) {
  std::string name;
  AOTPACK_RETURN_IF_ERROR(r.string_field(item, path, "kernel", &name));
  auto it = std::find_if(plan.kernels.begin(), plan.kernels.end(), [&](const CudaKernelInfo& k) { return k.name == name; });
  if (it == plan.kernels.end()) return r.error(JsonReader::join(path, "kernel"), str_cat("no kernel ", quoted(name), " in cuda.kernels"));
  *out = static_cast<size_t>(it - plan.kernels.begin());
  return Status();
}

Status parse_grid(const JsonReader& r, const Program& program, const json::Value& item, const std::string& path,
                  std::array<Expr, 3>* out) {
  const std::vector<json::Value>* grid;
  AOTPACK_RETURN_IF_ERROR(r.array_field(item, path, "grid", &grid));
  if (grid->size() != 3) return r.error(JsonReader::join(path, "grid"), "expected 3 expressions");
  for (size_t g = 0; g < 3; ++g) {
    AOTPACK_RETURN_IF_ERROR(parse_expr((*grid)[g], program.symbol_names, r,
                                       JsonReader::join(JsonReader::join(path, "grid"), g), &(*out)[g]));
  }
  return Status();
}

// "split": {"kernel": NAME, "grid": [...]}, optional beside a launch's "kernel" (its unsplit twin): a split-K
// kernel, which takes the twin's parameters and then its workspace. A split-K kernel may be named only here,
// since a runtime that does not know "split" launches "kernel" without the workspace.
Status parse_split_launch(const JsonReader& r, const CudaPlan& plan, const Program& program, const json::Value& item,
                          const std::string& path, size_t twin, CudaSplitLaunch* out) {
  const CudaKernelInfo& own = plan.kernels[twin];
  if (own.split_programs > 0)
    return r.error(JsonReader::join(path, "kernel"), str_cat("kernel ", quoted(own.name), " is a split-K kernel, "
                                                            "which only a \"split\" entry may launch"));
  const json::Value* split = item.find("split");
  if (!split) return Status();
  const std::string spath = JsonReader::join(path, "split");
  if (!split->is_object()) return r.error(spath, "expected an object");
  AOTPACK_RETURN_IF_ERROR(find_kernel(r, plan, *split, spath, &out->kernel));
  const CudaKernelInfo& k = plan.kernels[out->kernel];
  if (k.split_programs == 0)
    return r.error(JsonReader::join(spath, "kernel"), str_cat("kernel ", quoted(k.name), " takes no split-K workspace"));
  if (k.symbols != own.symbols || k.errors.size() != own.errors.size())
    return r.error(JsonReader::join(spath, "kernel"), str_cat("kernel ", quoted(k.name), " takes other parameters than ",
                                                             quoted(own.name), ", the kernel it splits"));
  return parse_grid(r, program, *split, spath, &out->grid);
}

// "variants": {"size": EXPR, "buckets": [{"upto": N, "kernel": NAME, "grid": [...]}, ...]}, optional. Every
// variant's kernel must take the step kernel's parameters (the launch's parameter array is built once per
// step), and the buckets must ascend.
Status parse_variants(const JsonReader& r, const CudaPlan& plan, const Program& program, const json::Value& item,
                      const std::string& path, CudaStep* step) {
  const json::Value* variants = item.find("variants");
  if (!variants) return Status();
  const std::string vpath = JsonReader::join(path, "variants");
  if (!variants->is_object()) return r.error(vpath, "expected an object");
  const json::Value* size = variants->find("size");
  if (!size) return r.error(vpath, "missing \"size\"");
  AOTPACK_RETURN_IF_ERROR(parse_expr(*size, program.symbol_names, r, JsonReader::join(vpath, "size"), &step->size));
  const std::vector<json::Value>* buckets;
  AOTPACK_RETURN_IF_ERROR(r.array_field(*variants, vpath, "buckets", &buckets));
  const CudaKernelInfo& own = plan.kernels[step->kernel];
  for (size_t v = 0; v < buckets->size(); ++v) {
    const std::string bpath = JsonReader::join(JsonReader::join(vpath, "buckets"), v);
    CudaVariant variant;
    AOTPACK_RETURN_IF_ERROR(r.int_field((*buckets)[v], bpath, "upto", &variant.upto));
    if (!step->variants.empty() && variant.upto <= step->variants.back().upto)
      return r.error(JsonReader::join(bpath, "upto"), "the buckets must ascend");
    AOTPACK_RETURN_IF_ERROR(find_kernel(r, plan, (*buckets)[v], bpath, &variant.kernel));
    const CudaKernelInfo& k = plan.kernels[variant.kernel];
    if (k.symbols != own.symbols || k.errors.size() != own.errors.size())
      return r.error(JsonReader::join(bpath, "kernel"), str_cat("kernel ", quoted(k.name), " takes other parameters than the step's kernel ",
                                                                quoted(own.name), "; variants must differ only in configuration"));
    AOTPACK_RETURN_IF_ERROR(parse_grid(r, program, (*buckets)[v], bpath, &variant.grid));
    AOTPACK_RETURN_IF_ERROR(parse_split_launch(r, plan, program, (*buckets)[v], bpath, variant.kernel, &variant.split));
    step->variants.push_back(std::move(variant));
  }
  return Status();
}

// A split-K kernel's "split": {"programs": P, "tile_bytes": T}, within what a session allocates for it.
Status parse_split(const json::Value& kernel, const JsonReader& r, const std::string& path, CudaKernelInfo* k) {
  const json::Value* split = kernel.find("split");
  if (!split) return Status();
  const std::string spath = JsonReader::join(path, "split");
  if (!split->is_object()) return r.error(spath, "expected an object");
  AOTPACK_RETURN_IF_ERROR(r.int_field(*split, spath, "programs", &k->split_programs));
  AOTPACK_RETURN_IF_ERROR(r.int_field(*split, spath, "tile_bytes", &k->split_tile_bytes));
  constexpr int64_t kMaxPrograms = int64_t{1} << 24, kMaxBytes = int64_t{1} << 30;
  if (k->split_programs < 1 || k->split_programs > kMaxPrograms)
    return r.error(JsonReader::join(spath, "programs"), str_cat("expected 1..", kMaxPrograms));
  if (k->split_tile_bytes < 4 || k->split_tile_bytes % 4 != 0 || k->split_tile_bytes > kMaxBytes / k->split_programs)
    return r.error(JsonReader::join(spath, "tile_bytes"),
                   str_cat("expected a multiple of 4 with programs x tile_bytes at most ", kMaxBytes));
  return Status();
}

}  // namespace

std::vector<std::pair<size_t, const std::array<Expr, 3>*>> step_launches(const CudaStep& step) {
  std::vector<std::pair<size_t, const std::array<Expr, 3>*>> launches = {{step.kernel, &step.grid}};
  if (step.split.kernel != kNoKernel) launches.emplace_back(step.split.kernel, &step.split.grid);
  for (const CudaVariant& v : step.variants) {
    launches.emplace_back(v.kernel, &v.grid);
    if (v.split.kernel != kNoKernel) launches.emplace_back(v.split.kernel, &v.split.grid);
  }
  return launches;
}

Status choose_variant(const CudaStep& step, const int64_t* symbols, size_t* kernel, const std::array<Expr, 3>** grid) {
  const CudaSplitLaunch* split = &step.split;
  *kernel = step.kernel;
  *grid = &step.grid;
  if (!step.variants.empty()) {
    int64_t size = 0;
    AOTPACK_RETURN_IF_ERROR(eval_expr(step.size, symbols, &size));
    for (const CudaVariant& v : step.variants) {
      if (size <= v.upto) {
        *kernel = v.kernel;
        *grid = &v.grid;
        split = &v.split;
        break;
      }
    }
  }
  if (split->kernel != kNoKernel) {
    *kernel = split->kernel;
    *grid = &split->grid;
  }
  return Status();
}

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
    AOTPACK_RETURN_IF_ERROR(parse_split((*kernels)[i], r, path, &k));
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
    AOTPACK_RETURN_IF_ERROR(find_kernel(r, plan, item, path, &step.kernel));
    const std::vector<json::Value>* args;
    AOTPACK_RETURN_IF_ERROR(r.array_field(item, path, "args", &args));
    for (size_t a = 0; a < args->size(); ++a) {
      std::string arg_path = JsonReader::join(JsonReader::join(path, "args"), a);
      if (!(*args)[a].is_int() || !index_of_id.count((*args)[a].as_int()))
        return r.error(arg_path, "expected the id of a buffer");
      step.args.push_back(index_of_id[(*args)[a].as_int()]);
    }
    if (step.args.empty()) return r.error(JsonReader::join(path, "args"), "a step needs at least its output buffer");
    AOTPACK_RETURN_IF_ERROR(parse_grid(r, program, item, path, &step.grid));
    AOTPACK_RETURN_IF_ERROR(parse_split_launch(r, plan, program, item, path, step.kernel, &step.split));
    AOTPACK_RETURN_IF_ERROR(parse_variants(r, plan, program, item, path, &step));
    plan.steps.push_back(std::move(step));
  }
  AOTPACK_RETURN_IF_ERROR(check_cuda_launches(program, plan));
  *out = std::move(plan);
  *present = true;
  return Status();
}

// Every launch within what a device takes at both ends of the declared ranges, each kernel given the same
// number of buffers by every step, each step's output (its last buffer) a buffer a kernel may write and not
// also one of its inputs, and every declared output written by some step.
Status check_cuda_launches(const Program& program, const CudaPlan& plan) {
  constexpr int64_t kMaxGrid[3] = {(int64_t{1} << 31) - 1, 65535, 65535};  // CUDA's limits on every device
  std::vector<int64_t> at[2];
  for (const Symbol& s : program.symbols) {
    at[0].push_back(s.min);
    at[1].push_back(s.max);
  }
  at[0].push_back(0);
  at[1].push_back(0);
  std::vector<int64_t> args_of(plan.kernels.size(), -1);
  std::vector<std::vector<bool>> writes(plan.steps.size());
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const CudaStep& step = plan.steps[s];
    // The step's own launch and each bucket's variant, checked alike.
    const auto launches = step_launches(step);
    for (size_t l = 0; l < launches.size(); ++l) {
      std::string where = l == 0 ? str_cat("program.json cuda.steps[", s, "]")
                                 : str_cat("program.json cuda.steps[", s, "].variants.buckets[", l - 1, "]");
      const std::string& name = plan.kernels[launches[l].first].name;
      int64_t& count = args_of[launches[l].first];
      if (count >= 0 && count != static_cast<int64_t>(step.args.size()))
        return data_loss(where, ": kernel ", name, " is given ", step.args.size(), " buffers here but ", count,
                         " by an earlier step; a kernel takes one fixed list of parameters");
      count = static_cast<int64_t>(step.args.size());
      const std::array<Expr, 3>& grid = *launches[l].second;
      for (size_t g = 0; g < 3; ++g) {
        for (const std::vector<int64_t>& values : at) {
          int64_t v = 0;
          AOTPACK_RETURN_IF_ERROR(eval_expr(grid[g], values.data(), &v).prefixed(str_cat(where, ".grid[", g, "]")));
          if (v < 0 || v > kMaxGrid[g])
            return data_loss(where, ".grid[", g, "] ", expr_to_string(grid[g], program.symbol_names), " is ", v,
                             " at the ", &values == &at[0] ? "minima" : "maxima", " of the declared ranges; a launch "
                             "takes 0..", kMaxGrid[g]);
        }
      }
    }
    std::string where = str_cat("program.json cuda.steps[", s, "]");
    const std::string& name = plan.kernels[step.kernel].name;
    size_t out = step.args.back();
    const Buffer& b = program.buffers[out];
    if (b.kind == BufferKind::kWeight || b.kind == BufferKind::kInput)
      return data_loss(where, ": kernel ", name, " writes its last buffer, but the step passes buffer ", b.id, ", a ",
                       buffer_kind_name(b.kind), ", which is read-only");
    for (size_t a = 0; a + 1 < step.args.size(); ++a) {
      if (step.args[a] == out)
        return data_loss(where, ": the output buffer ", b.id, " is also passed as argument ", a,
                         ": a written argument must not alias another");
    }
    writes[s].assign(step.args.size(), false);
    writes[s].back() = true;
  }
  // check_outputs_written reads program.steps' args; the CUDA steps are their own list.
  Program cuda_steps_view;
  cuda_steps_view.outputs = program.outputs;
  cuda_steps_view.buffers = program.buffers;
  for (const CudaStep& step : plan.steps) cuda_steps_view.steps.push_back(Step{name_of(plan, step), step.args});
  return check_outputs_written(cuda_steps_view, writes).prefixed("cuda");
}

}  // namespace aotpack
