// Host memory for a session's arena and outputs: aligned, zeroed (the pages touched now rather than in the
// first run), freed with the owner.
#ifndef AOTPACK_SRC_HOST_MEMORY_HPP_
#define AOTPACK_SRC_HOST_MEMORY_HPP_

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "status.hpp"

namespace aotpack {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostMemory = std::unique_ptr<uint8_t, FreeDeleter>;

// `bytes` rounded up to kArenaAlignment (never 0), aligned to it. RESOURCE_EXHAUSTED naming `what` when
// the allocation fails.
Status allocate_host(int64_t bytes, const char* what, HostMemory* out);

}  // namespace aotpack

#endif  // AOTPACK_SRC_HOST_MEMORY_HPP_
