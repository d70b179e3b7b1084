// One Triton model: its loaded package, shared by every instance (sessions hold their own references, and
// the runtime uploads a model's weights once per CUDA device, so instances on one device share them), its
// signature and the settings its configuration gives. Immutable after Create: instances read it concurrently.
#pragma once

#include <cstdint>
#include <string>

#include "aotpack.h"
#include "signature.hpp"
#include "triton_api.h"

namespace aotpack_triton {

class ModelState {
 public:
  // Opens <repository>/<version>/<default_model_filename, "model.aotpack" by default>, completes the
  // configuration when Triton allows it and checks it against the package.
  static TRITONSERVER_Error* Create(TRITONBACKEND_Model* triton_model, ModelState** out);
  ~ModelState();
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  const std::string& name() const { return name_; }
  const aotpack_model_t* model() const { return model_; }
  const Signature& signature() const { return signature_; }
  // Requests are concatenated on dim 0 (the batch symbol) when the configuration's max_batch_size is > 0.
  bool batching() const { return max_batch_size_ > 0; }
  int64_t max_rows() const { return signature_.batch.max; }
  int32_t num_threads() const { return num_threads_; }
  int32_t cuda_graphs() const { return cuda_graphs_; }
  int32_t cuda_pdl() const { return cuda_pdl_; }

 private:
  ModelState() = default;

  std::string name_;
  aotpack_model_t* model_ = nullptr;
  Signature signature_;
  int64_t max_batch_size_ = 0;
  int32_t num_threads_ = 1;
  int32_t cuda_graphs_ = 1;
  int32_t cuda_pdl_ = 1;
};

}  // namespace aotpack_triton
