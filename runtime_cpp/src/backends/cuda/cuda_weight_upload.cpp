#include "cuda_weight_upload.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace aotpack {

using namespace cuda;

namespace {

bool pageable_requested() {
  static const bool requested = [] {
    const char* v = std::getenv("AOTPACK_CUDA_WEIGHT_UPLOAD");
    return v && std::strcmp(v, "pageable") == 0;
  }();
  return requested;
}

Status upload_failed(const Driver& d, CUresult r, const WeightCopy& c, const std::string& device_label) {
  return check(d, r, str_cat("uploading weight buffer ", c.buffer_id, " to ", device_label).c_str());
}

Status upload_pageable(const Driver& d, const std::vector<WeightCopy>& copies, const std::string& device_label) {
  for (const WeightCopy& c : copies) {
    if (c.bytes == 0) continue;
    CUresult r = d.cuMemcpyHtoD(c.dst, c.src, c.bytes);
    if (r != CUDA_SUCCESS) return upload_failed(d, r, c, device_label);
  }
  return Status();
}

// The staging buffers (one or two), each with an event recorded after the copies queued from it. Copies go on
// the legacy default stream, as cuMemcpyHtoD's did. The destructor waits for every queued copy before it frees
// the memory they read, on the error paths too.
class Staging {
 public:
  explicit Staging(const Driver& d) : d_(d) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    for (int k = 0; k < count_; ++k) {
      if (pending_[k] && !record(k).ok()) d_.cuStreamSynchronize(nullptr);  // the event failed: wait for all
      // A failure here leaves nothing to report that the upload has not returned already.
      (void)wait(k);
    }
    for (int k = 0; k < 2; ++k) {
      if (events_[k]) d_.cuEventDestroy(events_[k]);
      if (buffers_[k]) d_.cuMemFreeHost(buffers_[k]);
    }
  }

  Status allocate(int count, size_t bytes) {
    count_ = count;
    for (int k = 0; k < count; ++k) {
      AOTPACK_RETURN_IF_ERROR(check(d_, d_.cuMemHostAlloc(&buffers_[k], bytes, 0),
                                    str_cat("cuMemHostAlloc(", bytes, " bytes to stage the weights)").c_str()));
      AOTPACK_RETURN_IF_ERROR(check(d_, d_.cuEventCreate(&events_[k], CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
    }
    return Status();
  }
  uint8_t* buffer(int k) const { return static_cast<uint8_t*>(buffers_[k]); }
  void queued(int k) { pending_[k] = true; }
  // Marks the end of what was queued from buffer k.
  Status record(int k) {
    if (!pending_[k]) return Status();
    pending_[k] = false;
    AOTPACK_CUDA_CHECK(d_, cuEventRecord(events_[k], nullptr), "cuEventRecord");
    recorded_[k] = true;
    return Status();
  }
  // Waits until buffer k may be written again.
  Status wait(int k) {
    if (!recorded_[k]) return Status();
    recorded_[k] = false;
    AOTPACK_CUDA_CHECK(d_, cuEventSynchronize(events_[k]), "waiting for the weight upload (cuEventSynchronize)");
    return Status();
  }

 private:
  const Driver& d_;
  int count_ = 0;
  void* buffers_[2] = {nullptr, nullptr};
  CUevent events_[2] = {nullptr, nullptr};
  bool pending_[2] = {false, false};
  bool recorded_[2] = {false, false};
};

// Each copy in pieces through the buffers in turn: a piece is copied out of the mapping into buffer k and queued
// to the device at once; a full buffer is marked, and the other one is refilled once its copies have landed.
Status upload_staged(const Driver& d, const std::vector<WeightCopy>& copies, const std::string& device_label,
                     Staging* staging, int count, size_t capacity) {
  int k = 0;
  size_t fill = 0;
  for (const WeightCopy& c : copies) {
    const uint8_t* src = static_cast<const uint8_t*>(c.src);
    for (uint64_t done = 0; done < c.bytes;) {
      if (fill == capacity) {
        AOTPACK_RETURN_IF_ERROR(staging->record(k));
        k = (k + 1) % count;
        fill = 0;
        AOTPACK_RETURN_IF_ERROR(staging->wait(k));
      }
      const size_t take = static_cast<size_t>(std::min<uint64_t>(capacity - fill, c.bytes - done));
      uint8_t* staged = staging->buffer(k) + fill;
      std::memcpy(staged, src + done, take);
      CUresult r = d.cuMemcpyHtoDAsync(c.dst + done, staged, take, nullptr);
      if (r != CUDA_SUCCESS) return upload_failed(d, r, c, device_label);
      staging->queued(k);
      done += take;
      fill += take;
    }
  }
  for (int j = 0; j < count; ++j) AOTPACK_RETURN_IF_ERROR(staging->record(j));
  for (int j = 0; j < count; ++j) AOTPACK_RETURN_IF_ERROR(staging->wait(j));
  return Status();
}

}  // namespace

Status upload_weights(const Driver& d, const std::vector<WeightCopy>& copies, const std::string& device_label,
                      std::string* how) {
  uint64_t total = 0;
  for (const WeightCopy& c : copies) total += c.bytes;
  if (pageable_requested()) {
    *how = "synchronous pageable copies, as AOTPACK_CUDA_WEIGHT_UPLOAD=pageable asks";
    return upload_pageable(d, copies, device_label);
  }
  if (total == 0) {
    *how = "nothing to copy";
    return Status();
  }
  // One buffer when the weights fit in it, else two in turn.
  const size_t capacity = static_cast<size_t>(std::min<uint64_t>(kWeightStagingBytes, total));
  const int count = total > capacity ? 2 : 1;
  const auto start = std::chrono::steady_clock::now();
  {
    Staging staging(d);
    Status st = staging.allocate(count, capacity);
    if (st.ok()) {
      const double alloc_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      *how = str_cat("through ", count, " page-locked staging buffer", count == 1 ? "" : "s", " of ", capacity,
                     " bytes, allocated in ", alloc_ms, " ms");
      return upload_staged(d, copies, device_label, &staging, count, capacity);
    }
    *how = str_cat("synchronous pageable copies: no page-locked staging memory (", st.message(), ")");
  }  // the staging memory there was is freed before the fallback
  return upload_pageable(d, copies, device_label);
}

}  // namespace aotpack
