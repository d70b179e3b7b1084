// SHA-256 (FIPS 180-4), hand-written because the runtime depends on no crypto library. Used only to check
// package members against the digests in manifest.json.
#ifndef AOTPACK_SRC_SHA256_HPP_
#define AOTPACK_SRC_SHA256_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

namespace aotpack {

// The lowercase hex digest of `size` bytes at `data`.
std::string sha256_hex(const uint8_t* data, size_t size);

}  // namespace aotpack

#endif  // AOTPACK_SRC_SHA256_HPP_
