#include "cpu_executable.hpp"

#include <string>
#include <unordered_map>

#include "cpu_features.hpp"
#include "cpu_workspace.hpp"
#include "json_reader.hpp"
#include "kernel_contracts.hpp"
#include "plan_check.hpp"

namespace aotpack {

Status CpuExecutable::load(const PackageParts& parts, std::unique_ptr<Executable>* out) {
  const Package& package = *parts.package;
  const Program& program = *parts.program;
  JsonReader r("manifest.json");
  const std::vector<json::Value>* targets;
  AOTPACK_RETURN_IF_ERROR(r.array_field(package.manifest(), "", "targets", &targets));
  // Among the CPU targets, the highest isa this host runs; else the reason the lowest one cannot run.
  int best = -1, best_level = -1, lowest_level = 1 << 30;
  Status lowest_failure;
  std::vector<std::string> libraries(targets->size());
  for (size_t i = 0; i < targets->size(); ++i) {
    std::string path = JsonReader::join("targets", i);
    std::string kind, arch, isa;
    AOTPACK_RETURN_IF_ERROR(r.string_field((*targets)[i], path, "kind", &kind));
    if (kind != "cpu") continue;
    AOTPACK_RETURN_IF_ERROR(r.string_field((*targets)[i], path, "arch", &arch));
    AOTPACK_RETURN_IF_ERROR(r.string_field((*targets)[i], path, "isa", &isa));
    AOTPACK_RETURN_IF_ERROR(r.string_field((*targets)[i], path, "library", &libraries[i]));
    int level = isa_level(isa);
    Status supported = check_host_supports(arch, isa);
    if (supported.ok() && level > best_level) {
      best = static_cast<int>(i);
      best_level = level;
    }
    if (!supported.ok() && level < lowest_level) {
      lowest_level = level;
      lowest_failure = supported.prefixed(str_cat("manifest.json targets[", i, "]"));
    }
  }
  if (best < 0) {
    if (!lowest_failure.ok()) return lowest_failure;
    return unsupported("no CPU kernel library: manifest.json \"targets\" has no entry of kind \"cpu\"");
  }
  std::unique_ptr<CpuExecutable> e(new CpuExecutable());
  e->program_ = &program;
  e->weight_data_ = parts.weight_data;
  const std::string& library = libraries[best];
  MemberBytes bytes;
  AOTPACK_RETURN_IF_ERROR(package.member(library, &bytes));
  AOTPACK_RETURN_IF_ERROR(KernelLibrary::open(library, bytes.data, bytes.size, &e->library_));
  AOTPACK_RETURN_IF_ERROR(e->resolve_steps(library));
  *out = std::move(e);
  return Status();
}

// With a kernel table, each step runs a kernel of the table and is checked against its contract; a library
// without one (exported before tables) resolves names among its own functions, unchecked (docs/COMPATIBILITY.md).
Status CpuExecutable::resolve_steps(const std::string& library) {
  const Program& program = *program_;
  step_kernels_.resize(program.steps.size());
  const aotpack_kernel_table_t* table = library_->table();
  if (!table) {
    for (size_t i = 0; i < program.steps.size(); ++i) {
      AOTPACK_RETURN_IF_ERROR(library_->legacy_kernel(program.steps[i].kernel, &step_kernels_[i])
                                  .prefixed(str_cat("program.json steps[", i, "]")));
    }
    return Status();
  }
  AOTPACK_RETURN_IF_ERROR(check_table_symbols(library, *table, program));
  std::unordered_map<const aotpack_kernel_entry_t*, KernelContract> contracts;  // parsed once per kernel
  std::vector<std::vector<bool>> writes(program.steps.size());
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const Step& step = program.steps[i];
    std::string where = str_cat("program.json steps[", i, "]");
    const aotpack_kernel_entry_t* entry = nullptr;
    AOTPACK_RETURN_IF_ERROR(library_->entry(step.kernel, &entry).prefixed(where));
    auto it = contracts.find(entry);
    if (it == contracts.end()) {
      KernelContract contract;
      AOTPACK_RETURN_IF_ERROR(kernel_contract(library, *entry, program, &contract));
      it = contracts.emplace(entry, std::move(contract)).first;
    }
    AOTPACK_RETURN_IF_ERROR(check_step(program, where, step, it->second));
    for (const ArgContract& arg : it->second.args) writes[i].push_back(arg.writes);
    step_kernels_[i] = entry->fn;
  }
  return check_outputs_written(program, writes);
}

Status CpuExecutable::create_workspace(const WorkspaceOptions& options, std::unique_ptr<Workspace>* out) const {
  return CpuWorkspace::create(*this, options, *weight_data_, out);
}

Status CpuExecutable::create_workspace_with_weights(const WorkspaceOptions& options,
                                                    const std::vector<const void*>& weight_data,
                                                    std::unique_ptr<Workspace>* out) const {
  return CpuWorkspace::create(*this, options, weight_data, out);
}

}  // namespace aotpack
