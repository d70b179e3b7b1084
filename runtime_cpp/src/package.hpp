// The package container (docs/package-format.md, "Container" and "manifest.json"): maps the file, reads its
// zip directory, parses manifest.json, checks the format identity and (optionally) every member's digest.
#ifndef AOTPACK_SRC_PACKAGE_HPP_
#define AOTPACK_SRC_PACKAGE_HPP_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "json.hpp"
#include "mapped_file.hpp"
#include "status.hpp"
#include "zip_reader.hpp"

namespace aotpack {

constexpr const char* kFormatName = "aotpack";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kManifestMember = "manifest.json";
constexpr const char* kProgramMember = "program.json";
constexpr const char* kWeightsMember = "weights.safetensors";

struct MemberBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// An open package. Immutable: safe to read from any thread.
class Package {
 public:
  // Errors do not name the package file (the caller prefixes "package PATH").
  Status open(const std::string& path, bool verify_digests);

  const json::Value& manifest() const { return manifest_; }
  const std::string& manifest_text() const { return manifest_text_; }
  // The bytes of member `name`; NOT_FOUND naming it when the package lacks it.
  Status member(std::string_view name, MemberBytes* out) const;

 private:
  Status check_format() const;
  Status check_members(bool verify_digests) const;

  MappedFile file_;
  std::vector<ZipMember> members_;
  std::string manifest_text_;
  json::Value manifest_;
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_PACKAGE_HPP_
