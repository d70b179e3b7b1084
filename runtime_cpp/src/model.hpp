// A loaded package: its program, its weights in place in the mapped file, and its CPU kernels resolved.
#ifndef AOTPACK_SRC_MODEL_HPP_
#define AOTPACK_SRC_MODEL_HPP_

#include <memory>
#include <string>
#include <vector>

#include "aotpack.h"
#include "aotpack_kernel_abi.h"
#include "cuda_backend.hpp"
#include "kernel_library.hpp"
#include "package.hpp"
#include "program.hpp"
#include "status.hpp"

// The C API's opaque model. Immutable after load: safe to share across threads and sessions.
struct aotpack_model {
 public:
  // Every error message starts with "package PATH: ".
  static aotpack::Status load(const std::string& path, bool verify_digests, std::unique_ptr<aotpack_model>* out);

  const aotpack::Program& program() const { return program_; }
  const std::vector<aotpack_tensor_info_t>& input_infos() const { return input_infos_; }
  const std::vector<aotpack_tensor_info_t>& output_infos() const { return output_infos_; }
  const std::string& manifest_text() const { return package_.manifest_text(); }
  // The data of weight buffer `buffer` (an index into program().buffers), read-only.
  const void* weight_data(size_t buffer) const { return weight_data_[buffer]; }
  aotpack_kernel_fn step_kernel(size_t step) const { return step_kernels_[step]; }
  // Whether the package has CPU kernels this host runs (a CUDA-only package has none), and its CUDA side
  // (null when the package has no CUDA target).
  bool has_cpu_kernels() const { return kernels_ != nullptr; }
  const std::string& cpu_unavailable() const { return cpu_unavailable_; }  // why not, for messages
  const aotpack::CudaModel* cuda() const { return cuda_.get(); }
  const std::string& cuda_unavailable() const { return cuda_unavailable_; }  // a bad CUDA part: why
  int64_t kernel_scratch_bytes() const { return kernels_ ? kernels_->scratch_bytes() : 0; }

 private:
  aotpack::Status load_impl(const std::string& path, bool verify_digests);
  aotpack::Status load_weights();
  aotpack::Status check_signature() const;
  aotpack::Status load_kernels();
  void build_infos();

  aotpack::Package package_;
  std::vector<aotpack::safetensors::TensorView> weights_;
  aotpack::Program program_;
  std::vector<const void*> weight_data_;                // per buffer; null for other kinds
  std::vector<std::unique_ptr<uint8_t[]>> weight_copies_;  // weights whose place in the file is misaligned
  std::unique_ptr<aotpack::KernelLibrary> kernels_;
  std::vector<aotpack_kernel_fn> step_kernels_;
  std::vector<aotpack_tensor_info_t> input_infos_, output_infos_;
  std::string cpu_unavailable_, cuda_unavailable_;
  std::unique_ptr<aotpack::CudaModel> cuda_;
};

#endif  // AOTPACK_SRC_MODEL_HPP_
