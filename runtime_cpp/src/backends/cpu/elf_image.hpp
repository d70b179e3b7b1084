// The ELF headers of a kernel library checked against the bytes given, before the dynamic loader sees them:
// dlopen maps each segment from the file and would die of SIGBUS touching a page past a truncated file's end.
#ifndef AOTPACK_SRC_BACKENDS_CPU_ELF_IMAGE_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_ELF_IMAGE_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

#include "status.hpp"

namespace aotpack {

// OK when [data, data + size) is a 64-bit little-endian ELF shared object for this host's machine whose
// program headers, every segment's file bytes, section headers and every section's file bytes lie inside
// it; else DATA_LOSS naming `member` and the first header that does not fit (UNSUPPORTED for another
// machine or class).
Status check_elf_image(const std::string& member, const uint8_t* data, size_t size);

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_ELF_IMAGE_HPP_
