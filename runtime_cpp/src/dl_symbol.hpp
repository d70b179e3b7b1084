// Resolving a function of a library opened at run time (libcuda, libcrypto) into a typed pointer.
#ifndef AOTPACK_SRC_DL_SYMBOL_HPP_
#define AOTPACK_SRC_DL_SYMBOL_HPP_

#include <dlfcn.h>

namespace aotpack {

// *out = the function `name` of `handle` (null when it has none); whether it was found.
template <typename F>
bool resolve_symbol(void* handle, const char* name, F* out) {
  void* p = dlsym(handle, name);
  *out = reinterpret_cast<F>(p);
  return p != nullptr;
}

}  // namespace aotpack

#endif  // AOTPACK_SRC_DL_SYMBOL_HPP_
