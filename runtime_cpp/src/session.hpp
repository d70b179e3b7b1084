// A session: one model run on one device. It checks each run's inputs against the signature, binds the
// symbols and checks the buffer sizes; its backend's workspace, made at creation with everything a run
// needs, does the rest, so a run allocates nothing (except to describe a failure).
#ifndef AOTPACK_SRC_SESSION_HPP_
#define AOTPACK_SRC_SESSION_HPP_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aotpack.h"
#include "backend.hpp"
#include "model.hpp"
#include "status.hpp"

// The C API's opaque session. One thread at a time: a call made while another thread is inside run or output
// gets an error (INVALID_ARGUMENT) instead of running, so misuse cannot corrupt a run (see InUse).
struct aotpack_session {
 public:
  aotpack_session(const aotpack_session&) = delete;
  aotpack_session& operator=(const aotpack_session&) = delete;

  ~aotpack_session();

  // The session holds a reference to `model` (aotpack_model::retain) until it is destroyed.
  static aotpack::Status create(const aotpack_model* model, const aotpack_session_options_t& options,
                                std::unique_ptr<aotpack_session>* out);

  aotpack::Status run(const aotpack_tensor_t* inputs, size_t num_inputs);
  // aotpack_session_run_after (aotpack.h).
  aotpack::Status run_after(const aotpack_tensor_t* inputs, size_t num_inputs, void* stream);
  // aotpack_session_enqueue and aotpack_session_synchronize (aotpack.h).
  aotpack::Status enqueue(const aotpack_tensor_t* inputs, size_t num_inputs, void* stream);
  aotpack::Status synchronize();
  aotpack::Status output(size_t index, aotpack_tensor_t* out) const;
  aotpack_memory_t io_memory() const { return workspace_->io_memory(); }

 private:
  explicit aotpack_session(const aotpack_model* model) : model_(model) { model_->retain(); }

  // Marks the session busy for one call: an atomic exchange, no lock, so a correct caller pays one
  // uncontended atomic per call. A second thread arriving meanwhile sees busy() and is refused.
  class InUse {
   public:
    explicit InUse(const aotpack_session& s) : s_(s), acquired_(!s.in_use_.exchange(true, std::memory_order_acquire)) {}
    ~InUse() {
      if (acquired_) s_.in_use_.store(false, std::memory_order_release);
    }
    bool busy() const { return !acquired_; }

   private:
    const aotpack_session& s_;
    const bool acquired_;
  };
  static aotpack::Status in_use_error(const char* call);

  // A synchronous run; after the work queued on `*after` so far where it is given (run_after).
  aotpack::Status run_impl(const aotpack_tensor_t* inputs, size_t num_inputs, void* const* after = nullptr);
  aotpack::Status prepare_run(const aotpack_tensor_t* inputs, size_t num_inputs);
  aotpack::Status check_inputs(const aotpack_tensor_t* inputs, size_t num_inputs);
  aotpack::Status plan_buffers();
  std::string symbol_values() const;  // "batch=3, seq=8", for messages

  const aotpack_model* model_;
  std::unique_ptr<aotpack::Workspace> workspace_;
  std::vector<const void*> input_data_;  // per program input, set by each run
  std::vector<std::array<int64_t, AOTPACK_MAX_RANK>> output_shapes_;
  std::vector<int64_t> symbols_;         // this run's symbol values, program order
  std::vector<char> bound_;              // whether symbols_[i] is bound yet in check_inputs
  bool have_outputs_ = false;
  mutable std::atomic<bool> in_use_{false};  // a thread is inside run or output (InUse)
};

#endif  // AOTPACK_SRC_SESSION_HPP_
