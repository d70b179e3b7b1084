// The CUDA backend's entry in the registry: Triton cubins launched through the driver API on an NVIDIA GPU.
#include "backend.hpp"
#include "cuda_executable.hpp"

namespace aotpack {

namespace {

// A CUDA part this runtime cannot read leaves the package's other targets usable; a CUDA session then says why.
bool load_failure_is_tolerable(const Status& /*failure*/) { return true; }

Status unavailable(const Status& why) {
  if (!why.ok()) return unsupported("the package's CUDA kernels cannot be used: ", why.message());
  return unsupported("the package has no CUDA kernels (export it with --target cuda or cpu,cuda); use the CPU device");
}

// Checked when the device is set up, against the devices the driver reports.
Status check_device_index(int /*device_index*/) { return Status(); }

}  // namespace

const Backend& cuda_backend() {
  static const Backend backend = {"cuda", AOTPACK_DEVICE_CUDA, &CudaExecutable::load, &load_failure_is_tolerable,
                                  &unavailable, &check_device_index};
  return backend;
}

}  // namespace aotpack
