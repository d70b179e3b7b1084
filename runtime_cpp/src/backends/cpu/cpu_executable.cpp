#include "cpu_executable.hpp"

#include <string>

#include "cpu_features.hpp"
#include "cpu_workspace.hpp"
#include "json_reader.hpp"

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
  e->step_kernels_.resize(program.steps.size());
  for (size_t i = 0; i < program.steps.size(); ++i) {
    AOTPACK_RETURN_IF_ERROR(e->library_->kernel(program.steps[i].kernel, &e->step_kernels_[i])
                                .prefixed(str_cat("program.json steps[", i, "]")));
  }
  *out = std::move(e);
  return Status();
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
