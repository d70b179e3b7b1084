#include "host_memory.hpp"

#include <cstring>

#include "program.hpp"

namespace aotpack {

Status allocate_host(int64_t bytes, const char* what, HostMemory* out) {
  // Round up to the alignment (aligned_alloc requires a multiple) and never ask for 0 bytes.
  uint64_t size = (static_cast<uint64_t>(bytes) + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  if (size == 0) size = kArenaAlignment;
  void* p = std::aligned_alloc(kArenaAlignment, size);
  if (!p) return resource_exhausted("cannot allocate ", bytes, " bytes for ", what);
  std::memset(p, 0, size);  // touch the pages now rather than in the first run
  out->reset(static_cast<uint8_t*>(p));
  return Status();
}

}  // namespace aotpack
