// The backends this runtime was built with, in AOTPACK_BACKENDS order (CMakeLists.txt).
#ifndef AOTPACK_SRC_BACKEND_REGISTRY_HPP_
#define AOTPACK_SRC_BACKEND_REGISTRY_HPP_

#include <cstddef>

#include "aotpack.h"
#include "backend.hpp"

namespace aotpack {

// Every backend, in registry order: the order in which a model loads their parts.
size_t num_backends();
const Backend& backend(size_t index);

// The index of the backend serving `device_type`; false when none does.
bool find_backend(int32_t device_type, size_t* index);  // an int: a caller's value, maybe no device type

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKEND_REGISTRY_HPP_
