#include "package.hpp"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

#include "json_reader.hpp"
#include "sha256.hpp"
#include "timing.hpp"

namespace aotpack {

// Threads that hash members at most: the weights are one member, so more rarely help.
constexpr unsigned kMaxDigestThreads = 8;

Status Package::open(const std::string& path, bool verify_digests) {
  PartTimer timer("package open (map, zip directory, manifest)");
  AOTPACK_RETURN_IF_ERROR(file_.open(path));
  Status st = read_zip_directory(file_.data(), file_.size(), &members_);
  if (!st.ok()) return st;
  for (const ZipMember& m : members_) {
    if (m.offset % 64 != 0)
      return data_loss("member ", m.name, " starts at offset ", m.offset,
                       ", not a multiple of 64 as the format requires (was the package rewritten by another zip tool?)");
  }
  MemberBytes manifest;
  if (!member(kManifestMember, &manifest).ok())
    return data_loss("no manifest.json member: this is not an aotpack package");
  manifest_text_.assign(reinterpret_cast<const char*>(manifest.data), manifest.size);
  AOTPACK_RETURN_IF_ERROR(json::parse(manifest_text_, &manifest_).prefixed("manifest.json"));
  AOTPACK_RETURN_IF_ERROR(JsonReader("manifest.json").expect_object(manifest_, ""));
  AOTPACK_RETURN_IF_ERROR(check_format());
  timer.stop();
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

namespace {

// One listed member whose digest is checked.
struct DigestJob {
  const std::string* name;
  std::string expected;
  MemberBytes bytes;
  bool matches = false;
};

// The digests of `jobs`, hashed on up to `threads` threads, largest members first so that the largest (the
// weights) starts at once and the small ones fill the other threads.
void hash_members(std::vector<DigestJob>* jobs, unsigned threads) {
  std::vector<size_t> order(jobs->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*jobs)[a].bytes.size > (*jobs)[b].bytes.size; });
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < order.size(); k = next++) {
      DigestJob& j = (*jobs)[order[k]];
      j.matches = sha256_hex(j.bytes.data, j.bytes.size) == j.expected;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones running (and this one) do the rest
    }
  }
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace

Status Package::check_members(bool verify_digests) const {
  JsonReader r("manifest.json");
  const json::Value* listed;
  AOTPACK_RETURN_IF_ERROR(r.object_field(manifest_, "", "members", &listed));
  std::vector<DigestJob> jobs;
  uint64_t total = 0;
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
    DigestJob job;
    job.name = &name;
    job.expected = std::move(digest);
    job.bytes = bytes;
    jobs.push_back(job);
    total += bytes.size;
  }
  if (verify_digests) {
    // Hashed in parallel (the members are independent); the first mismatch in manifest order is reported, as
    // when they were hashed one after another.
    PartTimer timer("digests");
    const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), kMaxDigestThreads));
    hash_members(&jobs, std::min<unsigned>(threads, static_cast<unsigned>(std::max<size_t>(jobs.size(), 1))));
    if (timings_enabled()) {
      uint64_t largest = 0;
      for (const DigestJob& j : jobs) largest = std::max<uint64_t>(largest, j.bytes.size);
      timer.stop(str_cat(jobs.size(), " members, ", total / 1000000.0, " MB, the largest ", largest / 1000000.0,
                         " MB, ", threads, " threads, sha256 ", sha256_accelerated() ? "with" : "without",
                         " the x86 SHA extensions"));
    }
    for (const DigestJob& j : jobs) {
      if (!j.matches)
        return data_loss("member ", *j.name,
                         " does not match its sha256 digest in manifest.json (the file is corrupt or was modified); "
                         "re-export it, or pass verify_digests=0 only for trusted files");
    }
  }
  // Only the manifest itself may go uncovered by a digest.
  for (const ZipMember& m : members_) {
    if (m.name != kManifestMember && !listed->find(m.name))
      return data_loss("member ", m.name, " is not listed in manifest.json \"members\", so no digest covers it");
  }
  return Status();
}

}  // namespace aotpack
