// SHA-256 (FIPS 180-4), used to check package members against the digests in manifest.json; that check reads
// every byte of the weights when a package is opened, so its speed is part of every cold start. Large inputs go
// to the system's OpenSSL libcrypto where the host has one (opened at run time, libcrypto.hpp: its assembly is
// faster than ours, docs/architecture.md "Cold start" has the numbers); otherwise, and for small inputs, the
// hand-written one here, with the x86 SHA extensions (SHA-NI) where the CPU has them, since the runtime must not
// depend on a crypto library being installed.
#ifndef AOTPACK_SRC_SHA256_HPP_
#define AOTPACK_SRC_SHA256_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

namespace aotpack {

enum class Sha256Impl {
  kBest,      // libcrypto for inputs of kLibcryptoMinBytes or more where the host has it, else kBuiltIn
  kBuiltIn,   // the x86 SHA extensions where the CPU has them, else kPortable
  kPortable,  // plain C++ (tests compare the three)
};

// Below this, kBest stays built in: opening libcrypto (about a millisecond, once per process) would cost more than
// it saves, and the first small digest of a load (manifest.json's) is on its critical path.
constexpr size_t kLibcryptoMinBytes = size_t{1} << 20;

// The lowercase hex digest of `size` bytes at `data`.
std::string sha256_hex(const uint8_t* data, size_t size, Sha256Impl impl = Sha256Impl::kBest);

// Whether kBuiltIn uses the x86 SHA extensions on this CPU.
bool sha256_accelerated();

// What kBest uses for an input of `size` bytes, for timing lines: "OpenSSL (libcrypto.so.3)", or the built-in one
// with or without the SHA extensions. For a large size, opens libcrypto if it was not open yet.
std::string sha256_implementation(size_t size);

}  // namespace aotpack

#endif  // AOTPACK_SRC_SHA256_HPP_
