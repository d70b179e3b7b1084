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

// Threads that hash members at most (besides the loading thread, which joins them when it waits): 250 MB of
// weights in 16 MiB chunks give eight two chunks each, and the weight upload, which runs meanwhile, needs a core.
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

// Member digests, checked on background threads. A member whose manifest record lists chunk digests
// (docs/package-format.md) is checked chunk by chunk, one job each, so that several threads share it: the weights
// are one member, and one SHA-256 stream cannot be split. Other members are one job each. Each job is written by
// the one thread that hashes it and read by waiters under the mutex.
struct Package::Digests {
  struct Job {
    size_t member = 0;  // index into members
    size_t chunk = 0;   // its place in the member (0 for a whole member)
    MemberBytes bytes;
    std::string expected;
    int state = 0;  // 0: pending, 1: matches, 2: does not match
  };
  struct Member {
    std::string name;
    size_t first_job = 0, num_jobs = 0;
    uint64_t chunk_size = 0;  // 0: checked whole, against its sha256
  };
  std::vector<Member> members;    // manifest order
  std::vector<Job> jobs;          // by member, then chunk
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

  void add(const std::string& name, MemberBytes bytes, std::string expected) {
    members.push_back({name, jobs.size(), 1, 0});
    Job job;
    job.member = members.size() - 1;
    job.bytes = bytes;
    job.expected = std::move(expected);
    jobs.push_back(std::move(job));
  }

  void add_chunked(const std::string& name, MemberBytes bytes, uint64_t chunk_size, std::vector<std::string> expected) {
    members.push_back({name, jobs.size(), expected.size(), chunk_size});
    for (size_t c = 0; c < expected.size(); ++c) {
      Job job;
      job.member = members.size() - 1;
      job.chunk = c;
      job.bytes.data = bytes.data + c * chunk_size;
      job.bytes.size = static_cast<size_t>(std::min<uint64_t>(chunk_size, bytes.size - c * chunk_size));
      job.expected = std::move(expected[c]);
      jobs.push_back(std::move(job));
    }
  }

  // Takes and hashes jobs until none is left; any thread may call it, the loading thread too.
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

  // Hashes on up to `threads` background threads, the smallest jobs first: those are the members a load reads
  // first (program.json, the kernels), and the chunks of the large members then share the threads evenly.
  // Without threads, here.
  void start_hashing(unsigned threads_wanted) {
    start = std::chrono::steady_clock::now();
    remaining = jobs.size();
    if (jobs.empty()) {
      end = start;
      return;
    }
    order.resize(jobs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return jobs[a].bytes.size < jobs[b].bytes.size; });
    for (const Member& m : members) {
      uint64_t size = 0;
      for (size_t k = 0; k < m.num_jobs; ++k) size += jobs[m.first_job + k].bytes.size;
      total += size;
      largest = std::max<uint64_t>(largest, size);
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

  // Waits for member m's jobs; its status, naming the first chunk that does not match.
  Status wait(size_t m) const {
    const Member& member = members[m];
    std::unique_lock<std::mutex> lock(mu);
    for (size_t k = 0; k < member.num_jobs; ++k) {
      const Job& j = jobs[member.first_job + k];
      done.wait(lock, [&] { return j.state != 0; });
      if (j.state == 1) continue;
      std::string where;
      if (member.chunk_size > 0) {
        const uint64_t from = j.chunk * member.chunk_size;
        where = str_cat("chunk ", j.chunk, " of ", member.num_jobs, ", bytes ", from, " to ", from + j.bytes.size - 1,
                        ", differs: ");
      }
      return data_loss("member ", member.name, " does not match its sha256 digest in manifest.json (", where,
                       "the file is corrupt or was modified); re-export it, or pass verify_digests=0 only for "
                       "trusted files");
    }
    return Status();
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
  for (size_t i = 0; i < digests_->members.size(); ++i) {
    if (digests_->members[i].name == name) return digests_->wait(i);
  }
  return Status();  // the manifest, which no digest covers
}

Status Package::wait_for_digests() const {
  if (!digests_) return Status();
  const auto wait_start = std::chrono::steady_clock::now();
  digests_->work();  // the jobs no thread has taken yet: this thread would only wait for them
  Status first;
  for (size_t i = 0; i < digests_->members.size(); ++i) {
    Status st = digests_->wait(i);
    if (first.ok() && !st.ok()) first = st;
  }
  if (timings_enabled()) {
    const auto wait_end = std::chrono::steady_clock::now();
    const Digests& d = *digests_;
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    size_t chunked = 0, largest_job = 0;
    for (const Digests::Member& m : d.members) chunked += m.chunk_size > 0 ? 1 : 0;
    for (const Digests::Job& j : d.jobs) largest_job = std::max(largest_job, j.bytes.size);
    report_timing("digests", ms(d.start, d.end),
                  str_cat(d.members.size(), " members (", chunked, " in chunks) in ", d.jobs.size(), " jobs, ",
                          d.total / 1000000.0, " MB (", d.total / 1000.0 / std::max(ms(d.start, d.end), 1e-3),
                          " MB/s), the largest ", d.largest / 1000000.0, " MB, ", d.num_threads,
                          " threads and the loading thread, sha256 ", sha256_implementation(largest_job),
                          "; overlapped with the rest of the load"));
    report_timing("waiting for the digests", ms(wait_start, wait_end),
                  "what the digests added to the load after the rest of it (the loading thread hashing too)");
  }
  return first;
}

// A member's chunk digests, when its record has them: *chunk_size 0 when it has none (a package written before
// them), else the size and one digest per chunk, checked against the member's size.
static Status read_chunk_digests(const JsonReader& r, const json::Value& entry, const std::string& path,
                                 uint64_t member_size, uint64_t* chunk_size, std::vector<std::string>* digests) {
  *chunk_size = 0;
  if (!entry.find("chunk_sha256") && !entry.find("chunk_size")) return Status();
  int64_t size = 0;
  const std::vector<json::Value>* list;
  AOTPACK_RETURN_IF_ERROR(r.int_field(entry, path, "chunk_size", &size));
  AOTPACK_RETURN_IF_ERROR(r.array_field(entry, path, "chunk_sha256", &list));
  if (size <= 0) return r.error(JsonReader::join(path, "chunk_size"), "expected a positive integer");
  const uint64_t expected = (member_size + static_cast<uint64_t>(size) - 1) / static_cast<uint64_t>(size);
  const std::string list_path = JsonReader::join(path, "chunk_sha256");
  if (list->size() != expected)
    return r.error(list_path, str_cat("has ", list->size(), " digests, but ", member_size, " bytes make ", expected,
                                      " chunks of ", size, " (the file is corrupt or was modified); re-export it"));
  for (size_t c = 0; c < list->size(); ++c) {
    if (!(*list)[c].is_string()) return r.error(JsonReader::join(list_path, c), "expected a sha256 digest (a string)");
    digests->push_back((*list)[c].as_string());
  }
  *chunk_size = static_cast<uint64_t>(size);
  return Status();
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
    uint64_t chunk_size = 0;
    std::vector<std::string> chunks;
    AOTPACK_RETURN_IF_ERROR(read_chunk_digests(r, entry, path, bytes.size, &chunk_size, &chunks));
    // The chunks stand for the whole digest: both are in manifest.json, which the package digest covers, and
    // `aotpack verify` checks that they agree (packages/reader.py).
    if (chunk_size > 0) {
      digests->add_chunked(name, bytes, chunk_size, std::move(chunks));
    } else {
      digests->add(name, bytes, std::move(digest));
    }
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
