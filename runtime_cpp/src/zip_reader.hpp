// Reads the directory of a zip archive held in memory: the members' names and where their (stored,
// uncompressed) bytes are. Hand-written because the runtime depends on no zip library; it supports exactly
// what the aotpack format allows (method 0, no zip64, no encryption, no data descriptors).
#ifndef AOTPACK_SRC_ZIP_READER_HPP_
#define AOTPACK_SRC_ZIP_READER_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "status.hpp"

namespace aotpack {

struct ZipMember {
  std::string name;
  uint64_t offset = 0;  // of the member's data in the archive, already bounds-checked
  uint64_t size = 0;
};

// Validates the end-of-central-directory record, every central directory entry and every local header,
// bounds-checking each offset and size before use. Errors do not name the archive (the caller does).
Status read_zip_directory(const uint8_t* data, size_t size, std::vector<ZipMember>* out);

}  // namespace aotpack

#endif  // AOTPACK_SRC_ZIP_READER_HPP_
