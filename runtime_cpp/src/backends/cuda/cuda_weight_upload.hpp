// The weights' one upload to a device, from the mapped package file: through two small page-locked staging
// buffers in turn, so that the copy of one piece out of the mapping (which takes the page faults) overlaps the
// DMA of the previous one, with one wait per buffer instead of one synchronous call per tensor.
//
// Why not the alternatives (docs/architecture.md, "Cold start"): cuMemcpyHtoD from the mapping makes the driver
// stage pageable memory itself, tensor by tensor, each call synchronous; registering the mapping
// (cuMemHostRegister, read-only) pins every page of the file, which costs about as much per byte as allocating
// page-locked memory and faults the whole mapping in first, on one thread, before the first byte moves.
#ifndef AOTPACK_SRC_BACKENDS_CUDA_CUDA_WEIGHT_UPLOAD_HPP_
#define AOTPACK_SRC_BACKENDS_CUDA_CUDA_WEIGHT_UPLOAD_HPP_

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_driver.hpp"
#include "status.hpp"

namespace aotpack {

// Each staging buffer's size: the DMA of one (about 0.2 ms at 25 GB/s) hides behind the host copy of the other,
// and two cost little to page-lock at the start of a cold load.
constexpr size_t kWeightStagingBytes = size_t{4} << 20;

struct WeightCopy {
  cuda::CUdeviceptr dst = 0;
  const void* src = nullptr;  // into the mapped package
  uint64_t bytes = 0;
  int64_t buffer_id = 0;  // the program buffer, for messages
};

// Copies every entry of `copies` to the device of the current context and waits until all have landed. Where
// page-locked memory cannot be had, uploads with synchronous pageable copies instead (and says so in *how).
// AOTPACK_CUDA_WEIGHT_UPLOAD=pageable asks for those always, to compare the two (scripts/gpu_cold_start.py).
Status upload_weights(const cuda::Driver& d, const std::vector<WeightCopy>& copies, const std::string& device_label,
                      std::string* how);

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CUDA_CUDA_WEIGHT_UPLOAD_HPP_
