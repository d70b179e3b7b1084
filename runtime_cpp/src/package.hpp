// The package container (docs/package-format.md, "Container" and "manifest.json"): maps the file, reads its
// zip directory, parses manifest.json, checks the format identity and (optionally) every member's digest.
#ifndef AOTPACK_SRC_PACKAGE_HPP_
#define AOTPACK_SRC_PACKAGE_HPP_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "json.hpp"
#include "mapped_file.hpp"
#include "signature.hpp"
#include "status.hpp"
#include "zip_reader.hpp"

namespace aotpack {

constexpr const char* kFormatName = "aotpack";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kManifestMember = "manifest.json";
constexpr const char* kProgramMember = "program.json";
constexpr const char* kWeightsMember = "weights.safetensors";

// A signature the package must carry to be opened: made by the holder of `key`, in the file `path`.
struct RequiredSignature {
  TrustedKey key;
  std::string path;
};

struct MemberBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// An open package. Immutable: safe to read from any thread.
//
// With digests on, open checks the structure and every member's size, then hashes the members on background
// threads while the caller goes on loading, a large member (the weights) in the chunks whose digests the manifest
// lists, several threads at once (older packages without chunk digests: each member whole, on one): member()
// waits for the member's own digest, so nothing is used before it is checked, except through
// member_unverified(), for bytes that are only parsed by a validating parser or copied (the weights, which the
// CUDA backend may upload while their digest is computed). wait_for_digests() says whether all matched.
class Package {
 public:
  Package();
  ~Package();  // waits for the digest threads, which read the mapping
  Package(const Package&) = delete;
  Package& operator=(const Package&) = delete;

  // Errors do not name the package file (the caller prefixes "package PATH"). With `signature`, the
  // signature is verified over the members right after the zip directory is read: before manifest.json is
  // parsed and any digest thread starts, and so before anything of the package is used.
  Status open(const std::string& path, bool verify_digests, const RequiredSignature* signature = nullptr);

  const json::Value& manifest() const { return manifest_; }
  const std::string& manifest_text() const { return manifest_text_; }
  // The package digest, "sha256:<hex>" of manifest.json's bytes as stored (docs/registries.md).
  const std::string& digest() const { return digest_; }
  // The bytes of member `name`, its digest checked (waiting for it): NOT_FOUND naming it when the package lacks
  // it, DATA_LOSS when its digest does not match.
  Status member(std::string_view name, MemberBytes* out) const;
  // The same bytes without waiting for the digest: only for data that is validated as it is read or merely
  // copied, and whose digest the caller awaits with wait_for_digests before the load succeeds.
  Status member_unverified(std::string_view name, MemberBytes* out) const;
  // Waits for every digest, hashing on this thread what no other has started: OK, or the first mismatch in
  // manifest order (the message names the member, and the chunk).
  Status wait_for_digests() const;

 private:
  struct Digests;  // the jobs and their threads

  Status check_format() const;
  Status check_signature(const RequiredSignature& signature) const;
  Status check_members(bool verify_digests);

  MappedFile file_;
  std::vector<ZipMember> members_;
  std::string manifest_text_;
  std::string digest_;
  json::Value manifest_;
  std::unique_ptr<Digests> digests_;  // null when not verifying
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_PACKAGE_HPP_
