// A package's CPU kernel library (cpu/<isa>/kernels.so), loaded from the package's bytes without unpacking
// it to disk: its ELF headers checked against its size, then written to a memfd and dlopen'ed through
// /proc/self/fd. Kernels are resolved only among the functions the library defines itself: through its kernel
// table (aotpack_kernel_abi.h) when it exports one, else (a library exported before the table existed) by
// name, refusing any name the library does not define (a C library function found through its dependencies).
#ifndef AOTPACK_SRC_BACKENDS_CPU_KERNEL_LIBRARY_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_KERNEL_LIBRARY_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

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

  // The library's kernel table (checked: version, every entry's fields, names unique, functions its own);
  // null for a library exported before tables existed.
  const aotpack_kernel_table_t* table() const { return table_; }
  // The entry of kernel `name` in the table; NOT_FOUND naming it. Only for a library with a table.
  Status entry(const std::string& name, const aotpack_kernel_entry_t** out) const;

  // A table-less library's kernel `name`, by name among the functions the library itself defines; NOT_FOUND
  // naming it when the library lacks it, or only its dependencies have it.
  Status legacy_kernel(const std::string& name, aotpack_kernel_fn* out) const;

  // Scratch bytes per thread the kernels need (aotpack_kernel_scratch_bytes(); 0 if not exported).
  int64_t scratch_bytes() const { return scratch_bytes_; }

 private:
  KernelLibrary() = default;

  Status load_table();
  // Whether `address` lies in this library (not in one of its dependencies); *where names where it is.
  bool defines(const void* address, std::string* where) const;

  std::string member_;
  std::string path_;  // what it was dlopen'ed as; the dynamic loader names it so
  void* handle_ = nullptr;
  const aotpack_kernel_table_t* table_ = nullptr;
  std::unordered_map<std::string, const aotpack_kernel_entry_t*> entries_;
  int64_t scratch_bytes_ = 0;
  int fd_ = -1;           // the memfd, kept open while loaded (see the destructor)
  std::string temp_path_; // the fallback temporary file, when memfd_create is unavailable
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_KERNEL_LIBRARY_HPP_
