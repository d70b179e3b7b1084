// A loaded package: its program, its weights in place in the mapped file, and each backend's part of it
// (its kernels loaded), or why that backend cannot run it. A refitted model (aotpack_model_refit) shares all
// of that with the model it was made from, except the weights: its own copy of the caller's.
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
  // Every error message starts with "package PATH: ". With `signature`, the package must be signed by its
  // key (Package::open) before anything else is read.
  static aotpack::Status load(const std::string& path, bool verify_digests,
                              const aotpack::RequiredSignature* signature, std::unique_ptr<aotpack_model>* out);

  // A new model running `base`'s kernels and plan with the weights in the safetensors bytes [data, data +
  // size), copied: they must have exactly the package's tensor names, dtypes and shapes (weights.safetensors'
  // own, as `aotpack refit` writes them), or INVALID_ARGUMENT lists every mismatch. Errors do not name the
  // package.
  static aotpack::Status refit(const aotpack_model& base, const uint8_t* data, size_t size,
                               std::unique_ptr<aotpack_model>* out);

  const aotpack::Program& program() const { return shared_->program; }
  const std::vector<aotpack_tensor_info_t>& input_infos() const { return shared_->input_infos; }
  const std::vector<aotpack_tensor_info_t>& output_infos() const { return shared_->output_infos; }
  const std::string& manifest_text() const { return shared_->package.manifest_text(); }
  const std::string& digest() const { return shared_->package.digest(); }
  // "sha256:<hex>" of the weights this model runs: the package's weights.safetensors, or the refit's bytes.
  const std::string& weights_digest() const { return weights_->digest; }
  bool refitted() const { return weights_ != shared_->own_weights; }

  // The executable of backend `index` (registry order) for this package, or null when it has none; then
  // *why says why (OK when the package has no target of that kind).
  const aotpack::Executable* executable(size_t backend_index, aotpack::Status* why) const;
  // A workspace of `executable` (this model's, for backend `backend_index`) bound to this model's weights.
  aotpack::Status create_workspace(const aotpack::Executable& executable, const aotpack::WorkspaceOptions& options,
                                   std::unique_ptr<aotpack::Workspace>* out) const;

 private:
  struct Target {
    std::unique_ptr<aotpack::Executable> executable;  // null: see why_not
    aotpack::Status why_not;
  };
  // A weight set: the tensors, and the host data of each weight buffer of the program (aligned).
  struct Weights {
    std::unique_ptr<uint8_t[]> bytes;                   // a refit's own copy of the safetensors file; else null
    std::vector<aotpack::safetensors::TensorView> tensors;
    std::vector<const void*> data;                      // per buffer; null for other kinds
    std::vector<std::unique_ptr<uint8_t[]>> copies;     // weights whose place in the file is misaligned
    std::string digest;
  };
  // What every model made from one package shares; immutable once loaded.
  struct Shared {
    aotpack::Package package;
    aotpack::Program program;
    std::shared_ptr<const Weights> own_weights;  // the package's
    std::vector<Target> targets;                 // per backend, registry order
    std::vector<aotpack_tensor_info_t> input_infos, output_infos;
  };

  aotpack::Status load_impl(const std::string& path, bool verify_digests, const aotpack::RequiredSignature* signature);
  aotpack::Status check_signature() const;
  aotpack::Status load_targets(const aotpack::json::Value& program_doc);
  void build_infos();
  static void place_weights(const aotpack::Program& program, Weights* weights);

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<const Weights> weights_;  // shared_->own_weights, or a refit's
};

#endif  // AOTPACK_SRC_MODEL_HPP_
