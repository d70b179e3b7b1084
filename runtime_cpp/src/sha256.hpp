// SHA-256 (FIPS 180-4), hand-written because the runtime depends on no crypto library. Used only to check
// package members against the digests in manifest.json; that check reads every byte of the weights when a
// package is opened, so where the CPU has the x86 SHA extensions (SHA-NI) they do the work, several times
// faster than plain C++.
#ifndef AOTPACK_SRC_SHA256_HPP_
#define AOTPACK_SRC_SHA256_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

namespace aotpack {

enum class Sha256Impl {
  kBest,      // the x86 SHA extensions where the CPU has them, else kPortable
  kPortable,  // plain C++ (tests compare the two)
};

// The lowercase hex digest of `size` bytes at `data`.
std::string sha256_hex(const uint8_t* data, size_t size, Sha256Impl impl = Sha256Impl::kBest);

// Whether kBest uses the x86 SHA extensions on this CPU.
bool sha256_accelerated();

}  // namespace aotpack

#endif  // AOTPACK_SRC_SHA256_HPP_
