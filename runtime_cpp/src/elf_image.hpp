// The ELF headers of a kernel binary checked against the bytes given, before a loader sees them: dlopen maps
// each segment of a CPU kernel library from the file and would die of SIGBUS touching a page past a truncated
// file's end; the CUDA driver reads a cubin's segments and sections from memory the same way.
#ifndef AOTPACK_SRC_ELF_IMAGE_HPP_
#define AOTPACK_SRC_ELF_IMAGE_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

#include "status.hpp"

namespace aotpack {

// What the binary must be.
struct ElfKind {
  uint16_t machine;   // e_machine: EM_X86_64, EM_CUDA, ...
  uint16_t type;      // e_type: ET_DYN (a shared library), ET_EXEC (a cubin)
  const char* what;   // for messages: "kernel library", "cubin"
  const char* machine_name;
};

// The host's shared libraries, and NVIDIA's cubins.
ElfKind host_shared_library();
ElfKind cuda_cubin();

// OK when [data, data + size) is a 64-bit little-endian ELF file of `kind` whose program headers, every
// segment's file bytes, section headers and every section's file bytes lie inside it; else DATA_LOSS naming
// `member` and the first header that does not fit (UNSUPPORTED for another machine, class or byte order).
Status check_elf_image(const std::string& member, const ElfKind& kind, const uint8_t* data, size_t size);

}  // namespace aotpack

#endif  // AOTPACK_SRC_ELF_IMAGE_HPP_
