#include "package.hpp"

#include "json_reader.hpp"
#include "sha256.hpp"

namespace aotpack {

Status Package::open(const std::string& path, bool verify_digests, const RequiredSignature* signature) {
  AOTPACK_RETURN_IF_ERROR(file_.open(path));
  Status st = read_zip_directory(file_.data(), file_.size(), &members_);
  if (!st.ok()) return st;
  for (const ZipMember& m : members_) {
    if (m.offset % 64 != 0)
      return data_loss("member ", m.name, " starts at offset ", m.offset,
                       ", not a multiple of 64 as the format requires (was the package rewritten by another zip tool?)");
  }
  if (signature) AOTPACK_RETURN_IF_ERROR(check_signature(*signature));
  MemberBytes manifest;
  if (!member(kManifestMember, &manifest).ok())
    return data_loss("no manifest.json member: this is not an aotpack package");
  manifest_text_.assign(reinterpret_cast<const char*>(manifest.data), manifest.size);
  digest_ = "sha256:" + sha256_hex(manifest.data, manifest.size);
  AOTPACK_RETURN_IF_ERROR(json::parse(manifest_text_, &manifest_).prefixed("manifest.json"));
  AOTPACK_RETURN_IF_ERROR(JsonReader("manifest.json").expect_object(manifest_, ""));
  AOTPACK_RETURN_IF_ERROR(check_format());
  return check_members(verify_digests);
}

Status Package::member(std::string_view name, MemberBytes* out) const {
  for (const ZipMember& m : members_) {
    if (m.name == name) {
      out->data = file_.data() + m.offset;
      out->size = static_cast<size_t>(m.size);
      return Status();
    }
  }
  return not_found("member ", name, " is missing");
}

Status Package::check_signature(const RequiredSignature& signature) {
  std::string bundle;
  AOTPACK_RETURN_IF_ERROR(read_small_file(signature.path, kMaxSignatureFileBytes, "signature file", &bundle));
  std::vector<SignedMember> members;
  members.reserve(members_.size());
  for (const ZipMember& m : members_) {
    members.push_back({m.name, file_.data() + m.offset, static_cast<size_t>(m.size)});
  }
  return verify_package_signature(signature.key, signature.path, bundle, members, &verified_sha256_);
}

Status Package::check_format() const {
  const json::Value* format = manifest_.find("format");
  const json::Value* version = manifest_.find("format_version");
  if (!format || !format->is_string() || format->as_string() != kFormatName)
    return unsupported("manifest.json: \"format\" is ",
                       format && format->is_string() ? quoted(format->as_string()) : std::string("missing or not a string"),
                       ", not \"aotpack\"; this is not an aotpack package");
  if (!version || !version->is_int())
    return unsupported("manifest.json: \"format_version\" is missing or not an integer");
  if (version->as_int() != kFormatVersion)
    return unsupported("format_version ", version->as_int(), " is not supported: this runtime loads format_version ",
                       kFormatVersion, " only; use a runtime that matches the exporter, or re-export the model");
  return Status();
}

Status Package::check_members(bool verify_digests) const {
  JsonReader r("manifest.json");
  const json::Value* listed;
  AOTPACK_RETURN_IF_ERROR(r.object_field(manifest_, "", "members", &listed));
  for (const auto& [name, entry] : listed->as_object()) {
    std::string path = JsonReader::join("members", name);
    std::string digest;
    int64_t size;
    AOTPACK_RETURN_IF_ERROR(r.string_field(entry, path, "sha256", &digest));
    AOTPACK_RETURN_IF_ERROR(r.int_field(entry, path, "size", &size));
    MemberBytes bytes;
    if (!member(name, &bytes).ok())
      return not_found("member ", name, " is listed in manifest.json but missing from the package");
    if (!verify_digests) continue;
    if (size < 0 || static_cast<uint64_t>(size) != bytes.size)
      return data_loss("member ", name, " is ", bytes.size, " bytes, but manifest.json says ", size,
                       " (the file is corrupt or was modified); re-export it, or pass verify_digests=0 only for "
                       "trusted files");
    auto known = verified_sha256_.find(name);
    if ((known != verified_sha256_.end() ? known->second : sha256_hex(bytes.data, bytes.size)) != digest)
      return data_loss("member ", name,
                       " does not match its sha256 digest in manifest.json (the file is corrupt or was modified); "
                       "re-export it, or pass verify_digests=0 only for trusted files");
  }
  // Only the manifest itself may go uncovered by a digest.
  for (const ZipMember& m : members_) {
    if (m.name != kManifestMember && !listed->find(m.name))
      return data_loss("member ", m.name, " is not listed in manifest.json \"members\", so no digest covers it");
  }
  return Status();
}

}  // namespace aotpack
