// The package container (docs/package-format.md, "Container" and "manifest.json"): maps the file, reads its
// zip directory, parses manifest.json, checks the format identity and (optionally) every member's digest.
#ifndef AOTPACK_SRC_PACKAGE_HPP_
#define AOTPACK_SRC_PACKAGE_HPP_

#include <cstdint>
#include <map>
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
class Package {
 public:
  // Errors do not name the package file (the caller prefixes "package PATH"). With `signature`, the
  // signature is verified over the members right after the zip directory is read: before manifest.json is
  // parsed, and so before anything of the package is used.
  Status open(const std::string& path, bool verify_digests, const RequiredSignature* signature = nullptr);

  const json::Value& manifest() const { return manifest_; }
  const std::string& manifest_text() const { return manifest_text_; }
  // The package digest, "sha256:<hex>" of manifest.json's bytes as stored (docs/registries.md).
  const std::string& digest() const { return digest_; }
  // The bytes of member `name`; NOT_FOUND naming it when the package lacks it.
  Status member(std::string_view name, MemberBytes* out) const;

 private:
  Status check_format() const;
  Status check_members(bool verify_digests) const;
  Status check_signature(const RequiredSignature& signature);

  MappedFile file_;
  std::vector<ZipMember> members_;
  std::string manifest_text_;
  std::string digest_;
  json::Value manifest_;
  std::map<std::string, std::string> verified_sha256_;  // per member, when a signature check hashed them
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_PACKAGE_HPP_
