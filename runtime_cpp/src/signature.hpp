// Verifies an OpenSSF Model Signing (OMS v1.0) signature of a package, as `aotpack sign --key` writes it
// (packages/signing.py, docs/registries.md): a Sigstore bundle (JSON) whose DSSE envelope carries an in-toto
// statement (payload type application/vnd.in-toto+json, predicate https://model_signing/signature/v1.0)
// listing every member of the package with its sha256. The envelope's one signature is ECDSA over the DSSE
// pre-authentication encoding (PAE) of the payload, with SHA-256 for a P-256 key (SHA-384 for P-384,
// SHA-512 for P-521, as model-signing's key signer chooses), checked through the system's libcrypto
// (libcrypto.hpp). Then every member's sha256 must equal the statement's, member for member: a member
// missing, added or changed is refused by name.
#ifndef AOTPACK_SRC_SIGNATURE_HPP_
#define AOTPACK_SRC_SIGNATURE_HPP_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "status.hpp"

namespace aotpack {

struct SignedMember {
  std::string_view name;
  const uint8_t* data;
  size_t size;
};

struct TrustedKey {
  std::string pem;    // the PEM public key (SubjectPublicKeyInfo, "-----BEGIN PUBLIC KEY-----")
  std::string where;  // for messages: the key file's path, or "the public key given in memory"
};

// The most a signature or key file may hold (a bundle of a package with thousands of members is far less).
constexpr size_t kMaxSignatureFileBytes = 16u << 20;
constexpr size_t kMaxKeyBytes = 1u << 20;

// Verifies `bundle` (the signature file's bytes; `signature_path` names it in messages) with `key` over
// `members` (every member of the package, manifest.json included). On success *sha256_by_member holds each
// member's hex digest, computed here (the package's own digest check, on background threads, does not use
// them yet: a signed load hashes the members twice).
// Errors (not prefixed with the package): NOT_FOUND/INVALID_ARGUMENT for the key, DATA_LOSS for a malformed
// signature, a signature that does not verify with the key, or a member that differs; UNSUPPORTED for a key
// type model-signing does not sign with or a host without libcrypto.
Status verify_package_signature(const TrustedKey& key, const std::string& signature_path, std::string_view bundle,
                                const std::vector<SignedMember>& members,
                                std::map<std::string, std::string>* sha256_by_member);

// Reads the whole regular file at `path` (at most `max_bytes`); NOT_FOUND when it does not exist. `what`
// names it in messages ("signature file", "public key file").
Status read_small_file(const std::string& path, size_t max_bytes, const char* what, std::string* out);

// Strict base64 (RFC 4648, the standard or the URL-safe alphabet, '=' padding optional); false on any
// other character or a bad length.
bool base64_decode(std::string_view in, std::string* out);

// DSSE's pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
std::string dsse_pae(std::string_view payload_type, std::string_view payload);

}  // namespace aotpack

#endif  // AOTPACK_SRC_SIGNATURE_HPP_
