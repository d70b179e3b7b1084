// The host CPU against a kernel library's `isa` (x86-64 micro-architecture levels, or "generic").
#ifndef AOTPACK_SRC_BACKENDS_CPU_CPU_FEATURES_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_CPU_FEATURES_HPP_

#include <string>

#include "status.hpp"

namespace aotpack {

// The level of `isa`: 0 generic, 2..4 for x86-64-v2..v4; -1 when unknown.
int isa_level(const std::string& isa);

// OK when the host runs code built for `isa` on `arch`; UNSUPPORTED naming the first missing feature.
Status check_host_supports(const std::string& arch, const std::string& isa);

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_CPU_FEATURES_HPP_
