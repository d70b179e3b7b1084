// A file mapped read-only into memory for the lifetime of the object (weights are used in place).
#ifndef AOTPACK_SRC_MAPPED_FILE_HPP_
#define AOTPACK_SRC_MAPPED_FILE_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

#include "status.hpp"

namespace aotpack {

// Move-only owner of a read-only mapping. Immutable once open: safe to read from any thread.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();

  // Maps the regular file at `path`; NOT_FOUND when it does not exist, DATA_LOSS when empty.
  Status open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_MAPPED_FILE_HPP_
