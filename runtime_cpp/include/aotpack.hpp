// A thin C++17 RAII wrapper over the C API of aotpack.h. Header-only; failures throw aotpack::Error.
//
//   aotpack::Model model("mlp.aotpack");
//   aotpack::Session session(model);               // one per thread that runs the model
//   session.run({x});                              // x: an aotpack_tensor_t in signature order
//   aotpack_tensor_t y = session.output(0);        // valid until the next run
//
// For tensors already on a GPU, a session with options.device_type = AOTPACK_DEVICE_CUDA and
// options.io_memory = AOTPACK_MEMORY_DEVICE takes and returns CUdeviceptr values (see aotpack.h).
#ifndef AOTPACK_HPP_
#define AOTPACK_HPP_

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "aotpack.h"

namespace aotpack {

// A failed call: the C status's code and message.
class Error : public std::runtime_error {
 public:
  Error(aotpack_status_code_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  aotpack_status_code_t code() const noexcept { return code_; }

 private:
  aotpack_status_code_t code_;
};

// Throws Error for a failed status, and frees it either way.
inline void check(aotpack_status_t status) {
  if (!status) return;
  aotpack_status_code_t code = aotpack_status_code(status);
  std::string message = aotpack_status_message(status);
  aotpack_status_free(status);
  throw Error(code, message);
}

// A loaded package; owns an aotpack_model_t. Immutable: safe to share across threads. Move-only.
class Model {
 public:
  explicit Model(const std::string& path, bool verify_digests = true) {
    aotpack_model_options_t options;
    aotpack_model_options_init(&options);
    options.verify_digests = verify_digests ? 1 : 0;
    check(aotpack_model_load(path.c_str(), &options, &model_));
  }
  // With every option (aotpack_model_options_init first): a required signature (public_key_path or
  // public_key_pem, signature_path), a device to prepare.
  Model(const std::string& path, const aotpack_model_options_t& options) {
    check(aotpack_model_load(path.c_str(), &options, &model_));
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model(Model&& other) noexcept : model_(std::exchange(other.model_, nullptr)) {}
  Model& operator=(Model&& other) noexcept {
    if (this != &other) {
      aotpack_model_release(model_);
      model_ = std::exchange(other.model_, nullptr);
    }
    return *this;
  }
  ~Model() { aotpack_model_release(model_); }

  size_t num_inputs() const { return aotpack_model_num_inputs(model_); }
  size_t num_outputs() const { return aotpack_model_num_outputs(model_); }
  aotpack_tensor_info_t input_info(size_t index) const {
    aotpack_tensor_info_t info;
    check(aotpack_model_input_info(model_, index, &info));
    return info;
  }
  aotpack_tensor_info_t output_info(size_t index) const {
    aotpack_tensor_info_t info;
    check(aotpack_model_output_info(model_, index, &info));
    return info;
  }
  std::string manifest() const { return aotpack_model_manifest(model_); }
  // The package digest, "sha256:<hex>" of manifest.json as stored.
  std::string digest() const { return aotpack_model_digest(model_); }
  // "sha256:<hex>" of the weights it runs (aotpack_model_weights_digest).
  std::string weights_digest() const { return aotpack_model_weights_digest(model_); }
  // A new model with this one's kernels and other weights (aotpack_model_refit); this one is unchanged.
  Model refit(const void* safetensors_bytes, size_t size) const {
    aotpack_model_t* out = nullptr;
    check(aotpack_model_refit(model_, safetensors_bytes, size, &out));
    return Model(out);
  }

  const aotpack_model_t* get() const { return model_; }

 private:
  explicit Model(aotpack_model_t* owned) : model_(owned) {}

  aotpack_model_t* model_ = nullptr;
};

// Scratch memory and threads for running a model; owns an aotpack_session_t. One thread at a time.
// The model must outlive the session. Move-only.
class Session {
 public:
  explicit Session(const Model& model, int num_threads = 1) {
    aotpack_session_options_t options;
    aotpack_session_options_init(&options);
    options.num_threads = num_threads;
    check(aotpack_session_create(model.get(), &options, &session_));
  }
  Session(const Model& model, const aotpack_session_options_t& options) {
    check(aotpack_session_create(model.get(), &options, &session_));
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  Session(Session&& other) noexcept : session_(std::exchange(other.session_, nullptr)) {}
  Session& operator=(Session&& other) noexcept {
    if (this != &other) {
      aotpack_session_destroy(session_);
      session_ = std::exchange(other.session_, nullptr);
    }
    return *this;
  }
  ~Session() { aotpack_session_destroy(session_); }

  // Inputs in signature order; they are borrowed for the duration of the call only.
  void run(const std::vector<aotpack_tensor_t>& inputs) {
    check(aotpack_session_run(session_, inputs.data(), inputs.size()));
  }
  // run(), after the work queued on a CUDA stream so far (a wait on the device, not the host; aotpack.h).
  void run_after(const std::vector<aotpack_tensor_t>& inputs, void* cuda_stream) {
    check(aotpack_session_run_after(session_, inputs.data(), inputs.size(), cuda_stream));
  }
  // Queues a run on a CUDA stream (a CUstream of the session's device) and returns without waiting; device I/O
  // only. synchronize() waits for the queued runs and throws for a check that failed in one (aotpack.h).
  void enqueue(const std::vector<aotpack_tensor_t>& inputs, void* cuda_stream) {
    check(aotpack_session_enqueue(session_, inputs.data(), inputs.size(), cuda_stream));
  }
  void synchronize() { check(aotpack_session_synchronize(session_)); }
  // Borrowed from the session: valid until the next run or the session's destruction.
  aotpack_tensor_t output(size_t index) const {
    aotpack_tensor_t out;
    check(aotpack_session_output(session_, index, &out));
    return out;
  }

  // Where run() takes inputs and output() returns data; AOTPACK_MEMORY_DEVICE: `data` holds CUdeviceptr values.
  aotpack_memory_t io_memory() const { return aotpack_session_io_memory(session_); }

  aotpack_session_t* get() const { return session_; }

 private:
  aotpack_session_t* session_ = nullptr;
};

}  // namespace aotpack

#endif  // AOTPACK_HPP_
