// Hand-written SHA-256 (FIPS 180-4), so that the runtime needs no library beyond the C++ standard library; large
// inputs go to libcrypto where the host has it (sha256.hpp says why).
#include "sha256.hpp"

#include <cstring>

#include "libcrypto.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace aotpack {
namespace {

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(uint32_t state[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) |
           (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + s1 + ch + kK[i] + w[i];
    uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void compress_blocks(uint32_t state[8], const uint8_t* data, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i) compress(state, data + 64 * i);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AOTPACK_HAVE_SHA_NI 1

// The same compression with the SHA extensions. sha256rnds2 runs two rounds on the state split as ABEF and
// CDGH; sha256msg1/msg2 extend the message schedule four words at a time: w[t..t+3] =
// msg2(msg1(w[t-16..], w[t-12..]) + w[t-7..t-4], w[t-4..t-1]).
__attribute__((target("sha,sse4.1,ssse3"))) void compress_blocks_sha_ni(uint32_t state[8], const uint8_t* data,
                                                                        size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  __m128i badc = _mm_shuffle_epi32(dcba, 0xB1);
  __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(badc, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, badc, 0xF0);
  for (size_t b = 0; b < blocks; ++b, data += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];
    for (int i = 0; i < 4; ++i)
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * i)), byte_swap);
    for (int r = 0; r < 16; ++r) {  // four rounds each
      if (r >= 4) {  // w[r % 4] holds w(r-4) and becomes w(r)
        __m128i previous = w[(r + 3) % 4];
        __m128i sum = _mm_add_epi32(_mm_sha256msg1_epu32(w[r % 4], w[(r + 1) % 4]),
                                    _mm_alignr_epi8(previous, w[(r + 2) % 4], 4));
        w[r % 4] = _mm_sha256msg2_epu32(sum, previous);
      }
      __m128i msg = _mm_add_epi32(w[r % 4], _mm_loadu_si128(reinterpret_cast<const __m128i*>(kK + 4 * r)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(msg, 0x0E));
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

bool cpu_has_sha_ni() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ssse3 && sse41 && (b & (1u << 29));
}
#endif

std::string hex_of(const uint8_t* bytes, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

// libcrypto's digest, when the host has the library (and it works): false otherwise, to fall back.
bool libcrypto_sha256(const uint8_t* data, size_t size, std::string* out) {
  const crypto::Library* lib = nullptr;
  if (!crypto::library(&lib).ok()) return false;
  unsigned char digest[32];
  unsigned int length = 0;
  if (lib->EVP_Digest(data, size, digest, &length, lib->EVP_sha256(), nullptr) != 1 || length != 32) {
    lib->ERR_clear_error();
    return false;
  }
  *out = hex_of(digest, 32);
  return true;
}

}  // namespace

bool sha256_accelerated() {
#ifdef AOTPACK_HAVE_SHA_NI
  static const bool has = cpu_has_sha_ni();
  return has;
#else
  return false;
#endif
}

std::string sha256_implementation(size_t size) {
  const crypto::Library* lib = nullptr;
  if (size >= kLibcryptoMinBytes && crypto::library(&lib).ok()) return str_cat("OpenSSL (", lib->soname, ")");
  return sha256_accelerated() ? "built in, with the x86 SHA extensions" : "built in, portable (no SHA extensions)";
}

std::string sha256_hex(const uint8_t* data, size_t size, Sha256Impl impl) {
  if (impl == Sha256Impl::kBest && size >= kLibcryptoMinBytes) {
    std::string out;
    if (libcrypto_sha256(data, size, &out)) return out;
  }
  uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto blocks = compress_blocks;
#ifdef AOTPACK_HAVE_SHA_NI
  if (impl != Sha256Impl::kPortable && sha256_accelerated()) blocks = compress_blocks_sha_ni;
#endif
  size_t full = size / 64;
  blocks(state, data, full);

  // The tail, a 0x80 byte, zeros, and the length in bits as a 64-bit big-endian number.
  uint8_t tail[128] = {};
  size_t rest = size - 64 * full;
  if (rest) std::memcpy(tail, data + 64 * full, rest);
  tail[rest] = 0x80;
  size_t tail_len = rest + 9 <= 64 ? 64 : 128;
  uint64_t bits = static_cast<uint64_t>(size) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_len - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  blocks(state, tail, tail_len / 64);

  uint8_t digest[32];
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) digest[4 * i + j] = static_cast<uint8_t>(state[i] >> (24 - 8 * j));
  }
  return hex_of(digest, 32);
}

}  // namespace aotpack
