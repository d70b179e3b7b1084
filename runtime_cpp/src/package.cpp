#include "package.hpp"

#include <algorithm>
#include <map>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "aotpack.h"
#include "json_reader.hpp"
#include "sha256.hpp"
#include "timing.hpp"

namespace aotpack {

// Threads that hash members at most: the weights are one member, so more rarely help.
constexpr unsigned kMaxDigestThreads = 8;

Status Package::open(const std::string& path, bool verify_digests, const RequiredSignature* signature) {
  PartTimer timer("package open (map, zip directory, manifest)");
  AOTPACK_RETURN_IF_ERROR(file_.open(path));
  Status st = read_zip_directory(file_.data(), file_.size(), &members_);
  if (!st.ok()) return st;
  for (const ZipMember& m : members_) {
    if (m.offset % 64 != 0)
      return data_loss("member ", m.name, " starts at offset ", m.offset,
                       ", not a multiple of 64 as the format requires (was the package rewritten by another zip tool?)");
  }
  if (signature) {
    PartTimer signature_timer("signature check (within package open)");
    AOTPACK_RETURN_IF_ERROR(check_signature(*signature));
  }
  MemberBytes manifest;
  if (!member_unverified(kManifestMember, &manifest).ok())
    return data_loss("no manifest.json member: this is not an aotpack package");
  manifest_text_.assign(reinterpret_cast<const char*>(manifest.data), manifest.size);
  digest_ = "sha256:" + sha256_hex(manifest.data, manifest.size);
  AOTPACK_RETURN_IF_ERROR(json::parse(manifest_text_, &manifest_).prefixed("manifest.json"));
  AOTPACK_RETURN_IF_ERROR(JsonReader("manifest.json").expect_object(manifest_, ""));
  AOTPACK_RETURN_IF_ERROR(check_format());
  timer.stop();
  return check_members(verify_digests);
}

Status Package::check_signature(const RequiredSignature& signature) const {
  std::string bundle;
  AOTPACK_RETURN_IF_ERROR(read_small_file(signature.path, kMaxSignatureFileBytes, "signature file", &bundle));
  std::vector<SignedMember> members;
  members.reserve(members_.size());
  for (const ZipMember& m : members_) {
    members.push_back({m.name, file_.data() + m.offset, static_cast<size_t>(m.size)});
  }
  std::map<std::string, std::string> hashed;
  return verify_package_signature(signature.key, signature.path, bundle, members, &hashed);
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
  // Which side must move depends on which is newer: a runtime never guesses at a format it predates.
  const int64_t found = version->as_int();
  if (found > kFormatVersion)
    return unsupported("format_version ", found, " is not supported: this runtime loads format_version ", kFormatVersion,
                       " only; the package is newer than this runtime (aotpack ", AOTPACK_VERSION_STRING,
                       "): upgrade the runtime to a release that loads format_version ", found,
                       " (docs/COMPATIBILITY.md), or re-export the model with the aotpack release of this runtime");
  if (found != kFormatVersion)
    return unsupported("format_version ", found, " is not supported: this runtime loads format_version ", kFormatVersion,
                       " only; re-export the model with this release (aotpack ", AOTPACK_VERSION_STRING,
                       "), or use a runtime that loads format_version ", found);
  return Status();
}

// Member digests, checked on background threads. Each job is written by the one thread that hashes it and read
// by waiters under the mutex.
struct Package::Digests {
  struct Job {
    std::string name;
    std::string expected;
    MemberBytes bytes;
    int state = 0;  // 0: pending, 1: matches, 2: does not match
  };
  std::vector<Job> jobs;          // manifest order
  std::vector<size_t> order;      // the order threads take them in
  std::atomic<size_t> next{0};
  mutable std::mutex mu;
  mutable std::condition_variable done;
  size_t remaining = 0;
  std::vector<std::thread> threads;
  std::chrono::steady_clock::time_point start, end;
  unsigned num_threads = 0;
  uint64_t total = 0, largest = 0;

  ~Digests() {
    for (std::thread& t : threads) t.join();
  }

  void work() {
    for (size_t k = next++; k < order.size(); k = next++) {
      Job& j = jobs[order[k]];
      const bool matches = sha256_hex(j.bytes.data, j.bytes.size) == j.expected;
      std::lock_guard<std::mutex> lock(mu);
      j.state = matches ? 1 : 2;
      if (--remaining == 0) end = std::chrono::steady_clock::now();
      done.notify_all();
    }
  }

  // Hashes on up to `threads` background threads: the largest member first (on its own, it bounds the time), then
  // the rest from the smallest, so the members a load reads first are ready soon. Without threads, here.
  void start_hashing(unsigned threads_wanted) {
    start = std::chrono::steady_clock::now();
    remaining = jobs.size();
    if (jobs.empty()) {
      end = start;
      return;
    }
    order.resize(jobs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return jobs[a].bytes.size < jobs[b].bytes.size; });
    std::rotate(order.begin(), order.end() - 1, order.end());  // the largest first
    for (const Job& j : jobs) {
      total += j.bytes.size;
      largest = std::max<uint64_t>(largest, j.bytes.size);
    }
    const unsigned n = std::min<unsigned>(threads_wanted, static_cast<unsigned>(jobs.size()));
    for (unsigned t = 0; t < n; ++t) {
      try {
        threads.emplace_back([this] { work(); });
      } catch (const std::system_error&) {
        break;  // no more threads: those running do the rest
      }
    }
    num_threads = static_cast<unsigned>(threads.size());
    if (threads.empty()) work();  // no thread at all: hash here, now
  }

  // Waits for job i; its status.
  Status wait(size_t i) const {
    std::unique_lock<std::mutex> lock(mu);
    done.wait(lock, [&] { return jobs[i].state != 0; });
    if (jobs[i].state == 1) return Status();
    return data_loss("member ", jobs[i].name,
                     " does not match its sha256 digest in manifest.json (the file is corrupt or was modified); "
                     "re-export it, or pass verify_digests=0 only for trusted files");
  }
};

Package::Package() = default;
Package::~Package() = default;  // digests_ first (declared last): its threads read file_

Status Package::member_unverified(std::string_view name, MemberBytes* out) const {
  for (const ZipMember& m : members_) {
    if (m.name == name) {
      out->data = file_.data() + m.offset;
      out->size = static_cast<size_t>(m.size);
      return Status();
    }
  }
  return not_found("member ", name, " is missing");
}

Status Package::member(std::string_view name, MemberBytes* out) const {
  AOTPACK_RETURN_IF_ERROR(member_unverified(name, out));
  if (!digests_) return Status();
  for (size_t i = 0; i < digests_->jobs.size(); ++i) {
    if (digests_->jobs[i].name == name) return digests_->wait(i);
  }
  return Status();  // the manifest, which no digest covers
}

Status Package::wait_for_digests() const {
  if (!digests_) return Status();
  const auto wait_start = std::chrono::steady_clock::now();
  Status first;
  for (size_t i = 0; i < digests_->jobs.size(); ++i) {
    Status st = digests_->wait(i);
    if (first.ok() && !st.ok()) first = st;
  }
  if (timings_enabled()) {
    const Digests& d = *digests_;
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    report_timing("digests", ms(d.start, d.end),
                  str_cat(d.jobs.size(), " members, ", d.total / 1000000.0, " MB, the largest ", d.largest / 1000000.0,
                          " MB, ", d.num_threads, " threads, sha256 ", sha256_accelerated() ? "with" : "without",
                          " the x86 SHA extensions; overlapped with the rest of the load"));
    report_timing("waiting for the digests", ms(wait_start, std::chrono::steady_clock::now()),
                  "what the digests added to the load after the rest of it");
  }
  return first;
}

Status Package::check_members(bool verify_digests) {
  JsonReader r("manifest.json");
  const json::Value* listed;
  AOTPACK_RETURN_IF_ERROR(r.object_field(manifest_, "", "members", &listed));
  std::unique_ptr<Digests> digests(new Digests());
  for (const auto& [name, entry] : listed->as_object()) {
    std::string path = JsonReader::join("members", name);
    std::string digest;
    int64_t size;
    AOTPACK_RETURN_IF_ERROR(r.string_field(entry, path, "sha256", &digest));
    AOTPACK_RETURN_IF_ERROR(r.int_field(entry, path, "size", &size));
    MemberBytes bytes;
    if (!member_unverified(name, &bytes).ok())
      return not_found("member ", name, " is listed in manifest.json but missing from the package");
    if (!verify_digests) continue;
    if (size < 0 || static_cast<uint64_t>(size) != bytes.size)
      return data_loss("member ", name, " is ", bytes.size, " bytes, but manifest.json says ", size,
                       " (the file is corrupt or was modified); re-export it, or pass verify_digests=0 only for "
                       "trusted files");
    Digests::Job job;
    job.name = name;
    job.expected = std::move(digest);
    job.bytes = bytes;
    digests->jobs.push_back(std::move(job));
  }
  // Only the manifest itself may go uncovered by a digest.
  for (const ZipMember& m : members_) {
    if (m.name != kManifestMember && !listed->find(m.name))
      return data_loss("member ", m.name, " is not listed in manifest.json \"members\", so no digest covers it");
  }
  if (verify_digests) {
    const unsigned hw = std::thread::hardware_concurrency();
    digests->start_hashing(std::max(2u, std::min(hw, kMaxDigestThreads)));
    digests_ = std::move(digests);
  }
  return Status();
}

}  // namespace aotpack
