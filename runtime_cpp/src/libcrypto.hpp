// The system's OpenSSL libcrypto, opened with dlopen at run time (libcrypto.so.3, else libcrypto.so.1.1) the
// way backends/cuda/cuda_driver.cpp opens libcuda: the runtime keeps no link-time dependency on it. It is opened
// by a model load that is given a trusted public key, and by the first digest of a large member (sha256.hpp),
// which falls back to the built-in SHA-256 where the host lacks it. Only the functions signature verification
// and digests need are resolved; the OpenSSL types stay opaque.
#ifndef AOTPACK_SRC_LIBCRYPTO_HPP_
#define AOTPACK_SRC_LIBCRYPTO_HPP_

#include <cstddef>

#include "status.hpp"

namespace aotpack {
namespace crypto {

struct Bio;    // BIO
struct Pkey;   // EVP_PKEY
struct MdCtx;  // EVP_MD_CTX
struct Md;     // EVP_MD
struct Engine; // ENGINE
struct PkeyCtx; // EVP_PKEY_CTX

constexpr int kPkeyEc = 408;  // EVP_PKEY_EC (NID_X9_62_id_ecPublicKey), the same in 1.1.1 and 3.x

struct Library {
  const char* soname = nullptr;  // the library that was opened
  Bio* (*BIO_new_mem_buf)(const void* buf, int len);
  int (*BIO_free)(Bio* bio);
  Pkey* (*PEM_read_bio_PUBKEY)(Bio* bio, Pkey** out, int (*password_cb)(char*, int, int, void*), void* u);
  void (*EVP_PKEY_free)(Pkey* key);
  int (*EVP_PKEY_id)(const Pkey* key);    // EVP_PKEY_get_id in 3.x
  int (*EVP_PKEY_bits)(const Pkey* key);  // EVP_PKEY_get_bits in 3.x
  MdCtx* (*EVP_MD_CTX_new)();
  void (*EVP_MD_CTX_free)(MdCtx* ctx);
  const Md* (*EVP_sha256)();
  const Md* (*EVP_sha384)();
  const Md* (*EVP_sha512)();
  int (*EVP_DigestVerifyInit)(MdCtx* ctx, PkeyCtx** pctx, const Md* type, Engine* e, Pkey* key);
  int (*EVP_DigestVerify)(MdCtx* ctx, const unsigned char* sig, size_t siglen, const unsigned char* tbs,
                          size_t tbslen);
  void (*ERR_clear_error)();
  int (*EVP_Digest)(const void* data, size_t count, unsigned char* md, unsigned int* size, const Md* type,
                    Engine* impl);
};

// The library, opened and resolved once per process. UNSUPPORTED, saying so, when the host has no usable
// libcrypto. AOTPACK_LIBCRYPTO (a file name or path) replaces the names tried, for tests.
Status library(const Library** out);

}  // namespace crypto
}  // namespace aotpack

#endif  // AOTPACK_SRC_LIBCRYPTO_HPP_
