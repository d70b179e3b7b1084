// A loaded package: its program, its weights in place in the mapped file, and each backend's part of it
// (its kernels loaded), or why that backend cannot run it. A refitted model (aotpack_model_refit) holds a
// reference to the loaded model it was made from and uses all of that but the weights: its own copy of the
// caller's.
#ifndef AOTPACK_SRC_MODEL_HPP_
#define AOTPACK_SRC_MODEL_HPP_

#include <atomic>
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
// Reference-counted: the loader's reference and one per session, so a model released while its sessions
// live (in C, or by Python's garbage collector finalizing a model before its session) stays until they end.
struct aotpack_model {
 public:
  void retain() const { references_.fetch_add(1, std::memory_order_relaxed); }
  // Drops one reference; the last one deletes the model.
  void release() const {
    if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  struct LoadOptions {
    bool verify_digests = true;
    // Sets the model up for this device during the load, while the digests are checked (Executable::prepare):
    // a prepare_device_type of -1 for none.
    int prepare_device_type = -1;
    int prepare_device_index = 0;
    // The signature the package must carry (Package::open checks it before anything else is read); or none.
    const aotpack::RequiredSignature* signature = nullptr;
  };
  // Every error message starts with "package PATH: ".
  static aotpack::Status load(const std::string& path, const LoadOptions& options, std::unique_ptr<aotpack_model>* out);

  // A new model running `base`'s kernels and plan with the weights in the safetensors bytes [data, data +
  // size), copied: they must have exactly the package's tensor names, dtypes and shapes (weights.safetensors'
  // own, as `aotpack refit` writes them), or INVALID_ARGUMENT lists every mismatch. Errors do not name the
  // package. The new model holds a reference to the loaded model `base` is (or was refitted from).
  static aotpack::Status refit(const aotpack_model& base, const uint8_t* data, size_t size,
                               std::unique_ptr<aotpack_model>* out);
  ~aotpack_model();

  const aotpack::Program& program() const { return root().program_; }
  const std::vector<aotpack_tensor_info_t>& input_infos() const { return root().input_infos_; }
  const std::vector<aotpack_tensor_info_t>& output_infos() const { return root().output_infos_; }
  const std::string& manifest_text() const { return root().package_.manifest_text(); }
  const std::string& digest() const { return root().package_.digest(); }
  // "sha256:<hex>" of the weights this model runs: the package's weights.safetensors, or the refit's bytes.
  const std::string& weights_digest() const { return weights_digest_; }
  bool refitted() const { return base_ != nullptr; }

  // The executable of backend `index` (registry order) for this package, or null when it has none; then
  // *why says why (OK when the package has no target of that kind).
  const aotpack::Executable* executable(size_t backend_index, aotpack::Status* why) const;
  // A workspace of `executable` (this model's) bound to this model's weights.
  aotpack::Status create_workspace(const aotpack::Executable& executable, const aotpack::WorkspaceOptions& options,
                                   std::unique_ptr<aotpack::Workspace>* out) const;

 private:
  struct Target {
    std::unique_ptr<aotpack::Executable> executable;  // null: see why_not
    aotpack::Status why_not;
  };

  aotpack::Status load_impl(const std::string& path, const LoadOptions& options);
  aotpack::Status load_parts(const LoadOptions& options);
  void prepare(const LoadOptions& options) const;
  aotpack::Status load_weights();
  aotpack::Status check_signature() const;
  void place_weights();
  aotpack::Status load_targets(const aotpack::json::Value& program_doc);
  void build_infos();

  // The loaded model whose package, program and executables this one uses: itself, or a refit's base.
  const aotpack_model& root() const { return base_ ? *base_ : *this; }

  mutable std::atomic<int> references_{1};
  const aotpack_model* base_ = nullptr;      // a refit's loaded model, retained; null for a loaded one
  std::unique_ptr<uint8_t[]> refit_bytes_;   // a refit's copy of the safetensors file
  std::string weights_digest_;
  aotpack::Package package_;
  std::vector<aotpack::safetensors::TensorView> weights_;  // a refit's own, in the package's order
  aotpack::Program program_;
  std::vector<const void*> weight_data_;                // per buffer; null for other kinds
  std::vector<std::unique_ptr<uint8_t[]>> weight_copies_;  // weights whose place in the file is misaligned
  std::vector<Target> targets_;                         // per backend, registry order
  std::vector<aotpack_tensor_info_t> input_infos_, output_infos_;
};

#endif  // AOTPACK_SRC_MODEL_HPP_
