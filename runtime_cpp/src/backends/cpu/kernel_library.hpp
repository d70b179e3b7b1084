// A package's CPU kernel library (cpu/<isa>/kernels.so), loaded from the package's bytes without unpacking
// it to disk: written to a memfd and dlopen'ed through /proc/self/fd.
#ifndef AOTPACK_SRC_BACKENDS_CPU_KERNEL_LIBRARY_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_KERNEL_LIBRARY_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "aotpack_kernel_abi.h"
#include "status.hpp"

namespace aotpack {

// Immutable once open: safe to use from any thread. dlclose'd on destruction.
class KernelLibrary {
 public:
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;
  ~KernelLibrary();

  // Loads the library bytes and checks its aotpack_kernel_abi_version(). `member` names it in messages.
  static Status open(const std::string& member, const uint8_t* data, size_t size,
                     std::unique_ptr<KernelLibrary>* out);

  // The exported kernel `name`; NOT_FOUND naming it when the library lacks it.
  Status kernel(const std::string& name, aotpack_kernel_fn* out) const;

  // Scratch bytes per thread the kernels need (aotpack_kernel_scratch_bytes(); 0 if not exported).
  int64_t scratch_bytes() const { return scratch_bytes_; }

 private:
  KernelLibrary() = default;

  std::string member_;
  void* handle_ = nullptr;
  int64_t scratch_bytes_ = 0;
  int fd_ = -1;           // the memfd, kept open while loaded (see the destructor)
  std::string temp_path_; // the fallback temporary file, when memfd_create is unavailable
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_KERNEL_LIBRARY_HPP_
