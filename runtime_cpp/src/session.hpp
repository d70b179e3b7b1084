// A session: the arena, output memory and threads for running one model, allocated once at creation so a
// run allocates nothing (except to describe a failure).
#ifndef AOTPACK_SRC_SESSION_HPP_
#define AOTPACK_SRC_SESSION_HPP_

#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aotpack.h"
#include "aotpack_kernel_abi.h"
#include "model.hpp"
#include "status.hpp"
#include "thread_pool.hpp"

// The C API's opaque session. One thread at a time.
struct aotpack_session {
 public:
  aotpack_session(const aotpack_session&) = delete;
  aotpack_session& operator=(const aotpack_session&) = delete;

  // `model` is borrowed and must outlive the session.
  static aotpack::Status create(const aotpack_model* model, const aotpack_session_options_t& options,
                                std::unique_ptr<aotpack_session>* out);

  aotpack::Status run(const aotpack_tensor_t* inputs, size_t num_inputs);
  aotpack::Status output(size_t index, aotpack_tensor_t* out) const;
  aotpack_memory_t io_memory() const { return device_io_ ? AOTPACK_MEMORY_DEVICE : AOTPACK_MEMORY_HOST; }

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  using Memory = std::unique_ptr<uint8_t, FreeDeleter>;

  explicit aotpack_session(const aotpack_model* model) : model_(model) {}
  static aotpack::Status allocate(int64_t bytes, const char* what, Memory* out);

  aotpack::Status check_inputs(const aotpack_tensor_t* inputs, size_t num_inputs);
  aotpack::Status plan_buffers();
  aotpack::Status run_steps();
  std::string symbol_values() const;  // "batch=3, seq=8", for messages

  // The kernel ABI's callbacks; ctx->runtime is the session.
  static void ctx_parallel_for(const aotpack_kernel_ctx* ctx, int64_t n, int64_t grain, aotpack_range_fn fn,
                               void* closure);
  static void ctx_report_error(const aotpack_kernel_ctx* ctx, const char* message);
  static void* ctx_thread_scratch(const aotpack_kernel_ctx* ctx);

  const aotpack_model* model_;
  std::unique_ptr<aotpack::ThreadPool> pool_;
  aotpack_kernel_ctx ctx_{};
  Memory arena_;
  std::vector<Memory> outputs_;                  // host output memory; null with device I/O
  std::vector<std::array<int64_t, AOTPACK_MAX_RANK>> output_shapes_;
  std::vector<void*> buffer_data_;               // per program buffer; inputs are set by each run
  std::vector<std::vector<void*>> step_args_;    // per step, filled by each run
  std::vector<int64_t> symbols_;                 // this run's symbol values, program order
  std::vector<char> bound_;                      // whether symbols_[i] is bound yet in check_inputs
  bool have_outputs_ = false;
  std::unique_ptr<aotpack::CudaSession> cuda_;  // set on a CUDA session: steps run there, not on the CPU
  bool device_io_ = false;                      // a CUDA session with AOTPACK_MEMORY_DEVICE inputs and outputs

  std::mutex error_mu_;
  std::atomic<bool> kernel_failed_{false};
  std::string kernel_error_;  // the first report_error message of the current step
};

#endif  // AOTPACK_SRC_SESSION_HPP_
