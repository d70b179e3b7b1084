#include "libcrypto.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "dl_symbol.hpp"

namespace aotpack {
namespace crypto {
namespace {

// OpenSSL 3 renamed a few functions (the old names became macros); either spelling will do.
template <typename F>
bool resolve_either(void* handle, const char* name, const char* old_name, F* out) {
  return resolve_symbol(handle, name, out) || resolve_symbol(handle, old_name, out);
}

Status load(Library* lib) {
  const char* override_name = std::getenv("AOTPACK_LIBCRYPTO");
  const char* defaults[] = {"libcrypto.so.3", "libcrypto.so.1.1"};
  std::string tried, errors;
  void* handle = nullptr;
  const char* soname = nullptr;
  auto try_open = [&](const char* name) {
    tried += str_cat(tried.empty() ? "" : ", ", name);
    // RTLD_LOCAL: its symbols stay out of the host process's global namespace (which may have its own).
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      soname = name;
    } else {
      const char* err = dlerror();
      errors += str_cat(errors.empty() ? "" : "; ", err ? err : "not found");
    }
  };
  if (override_name && *override_name) {
    try_open(override_name);
  } else {
    for (const char* name : defaults) {
      if (!handle) try_open(name);
    }
  }
  if (!handle)
    return unsupported("verifying a signature needs OpenSSL's libcrypto, which this host lacks (tried ", tried,
                       ": ", errors, "); install OpenSSL 3 or 1.1.1 (libcrypto.so.3 or libcrypto.so.1.1), or load "
                       "without a public key");
  const char* missing = nullptr;
#define AOTPACK_RESOLVE(field) \
  if (!missing && !resolve_symbol(handle, #field, &lib->field)) missing = #field;
#define AOTPACK_RESOLVE_EITHER(field, name) \
  if (!missing && !resolve_either(handle, name, #field, &lib->field)) missing = name;
  AOTPACK_RESOLVE(BIO_new_mem_buf)
  AOTPACK_RESOLVE(BIO_free)
  AOTPACK_RESOLVE(PEM_read_bio_PUBKEY)
  AOTPACK_RESOLVE(EVP_PKEY_free)
  AOTPACK_RESOLVE_EITHER(EVP_PKEY_id, "EVP_PKEY_get_id")
  AOTPACK_RESOLVE_EITHER(EVP_PKEY_bits, "EVP_PKEY_get_bits")
  AOTPACK_RESOLVE(EVP_MD_CTX_new)
  AOTPACK_RESOLVE(EVP_MD_CTX_free)
  AOTPACK_RESOLVE(EVP_sha256)
  AOTPACK_RESOLVE(EVP_sha384)
  AOTPACK_RESOLVE(EVP_sha512)
  AOTPACK_RESOLVE(EVP_DigestVerifyInit)
  AOTPACK_RESOLVE(EVP_DigestVerify)
  AOTPACK_RESOLVE(ERR_clear_error)
  AOTPACK_RESOLVE(EVP_Digest)
#undef AOTPACK_RESOLVE
#undef AOTPACK_RESOLVE_EITHER
  if (missing) {
    dlclose(handle);
    return unsupported("the OpenSSL library ", soname, " lacks ", missing,
                       "; verifying a signature needs OpenSSL 1.1.1 or later");
  }
  lib->soname = soname;
  // The handle stays open for the life of the process, like libcuda's.
  return Status();
}

}  // namespace

Status library(const Library** out) {
  static std::once_flag once;
  static Library instance;
  static Status result;
  std::call_once(once, [] { result = load(&instance); });
  if (!result.ok()) return result;
  *out = &instance;
  return Status();
}

}  // namespace crypto
}  // namespace aotpack
