// A loaded package: its program, its weights in place in the mapped file, and each backend's part of it
// (its kernels loaded), or why that backend cannot run it.
#ifndef AOTPACK_SRC_MODEL_HPP_
#define AOTPACK_SRC_MODEL_HPP_

#include <memory>
#include <string>
#include <vector>

#include "aotpack.h"
#include "backend.hpp"
#include "package.hpp"
#include "program.hpp"
#include "safetensors.hpp"
#include "status.hpp"

// The C API's opaque model. Immutable after load: safe to share across threads and sessions.
struct aotpack_model {
 public:
  // Every error message starts with "package PATH: ".
  // With `signature`, the package must be signed by its key (Package::open) before anything else is read.
  static aotpack::Status load(const std::string& path, bool verify_digests,
                              const aotpack::RequiredSignature* signature, std::unique_ptr<aotpack_model>* out);

  const aotpack::Program& program() const { return program_; }
  const std::vector<aotpack_tensor_info_t>& input_infos() const { return input_infos_; }
  const std::vector<aotpack_tensor_info_t>& output_infos() const { return output_infos_; }
  const std::string& manifest_text() const { return package_.manifest_text(); }
  const std::string& digest() const { return package_.digest(); }

  // The executable of backend `index` (registry order) for this package, or null when it has none; then
  // *why says why (OK when the package has no target of that kind).
  const aotpack::Executable* executable(size_t backend_index, aotpack::Status* why) const;

 private:
  struct Target {
    std::unique_ptr<aotpack::Executable> executable;  // null: see why_not
    aotpack::Status why_not;
  };

  aotpack::Status load_impl(const std::string& path, bool verify_digests, const aotpack::RequiredSignature* signature);
  aotpack::Status load_weights();
  aotpack::Status check_signature() const;
  void place_weights();
  aotpack::Status load_targets(const aotpack::json::Value& program_doc);
  void build_infos();

  aotpack::Package package_;
  std::vector<aotpack::safetensors::TensorView> weights_;
  aotpack::Program program_;
  std::vector<const void*> weight_data_;                // per buffer; null for other kinds
  std::vector<std::unique_ptr<uint8_t[]>> weight_copies_;  // weights whose place in the file is misaligned
  std::vector<Target> targets_;                         // per backend, registry order
  std::vector<aotpack_tensor_info_t> input_infos_, output_infos_;
};

#endif  // AOTPACK_SRC_MODEL_HPP_
