// The CPU backend's entry in the registry: the package's CPU kernel library run on host threads.
#include "backend.hpp"
#include "cpu_executable.hpp"

namespace aotpack {

namespace {

// A host that runs none of the package's CPU isas (or a package with no CPU target) may still run it on
// another device; a damaged CPU part fails the load.
bool load_failure_is_tolerable(const Status& failure) { return failure.code() == AOTPACK_UNSUPPORTED; }

Status unavailable(const Status& why) {
  return unsupported("the package has no CPU kernels this host can run (", why.message(), "); use a CUDA device");
}

Status check_device_index(int device_index) {
  if (device_index != 0)
    return invalid_argument("device_index ", device_index, " does not exist: the CPU device is index 0");
  return Status();
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend backend = {"cpu", AOTPACK_DEVICE_CPU, &CpuExecutable::load, &load_failure_is_tolerable,
                                  &unavailable, &check_device_index};
  return backend;
}

}  // namespace aotpack
