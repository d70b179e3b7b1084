// A fixed pool of threads running the chunks of one parallel loop at a time (the kernel ABI's parallel_for).
#ifndef AOTPACK_SRC_BACKENDS_CPU_THREAD_POOL_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_THREAD_POOL_HPP_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "aotpack_kernel_abi.h"
#include "status.hpp"

namespace aotpack {

// One parallel_for at a time (a session is used by one thread at a time); the calling thread works too, so
// num_threads = 1 starts no thread and runs every loop inline.
class ThreadPool {
 public:
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  // Each thread gets `scratch_bytes` of 64-byte-aligned scratch memory (the kernel ABI's thread_scratch).
  static Status create(int num_threads, int64_t scratch_bytes, std::unique_ptr<ThreadPool>* out);
  // The scratch of the calling thread: a worker's own inside a loop, else the calling thread's (block 0).
  void* scratch() const;

  int num_threads() const { return num_threads_; }

  // Runs fn over [0, n) in non-overlapping chunks of at least `grain` indices (the last may be shorter) and
  // returns when all are done. A call from inside a chunk runs inline instead of deadlocking.
  void parallel_for(int64_t n, int64_t grain, aotpack_range_fn fn, void* closure);

 private:
  explicit ThreadPool(int num_threads) : num_threads_(num_threads) {}
  void worker(int index);
  void run_chunks(int index);

  const int num_threads_;
  std::vector<std::thread> threads_;
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::vector<std::unique_ptr<void, FreeDeleter>> scratch_;  // one block per thread; [0]: the caller's

  std::mutex mu_;
  std::condition_variable work_cv_;  // a new loop, or stop
  std::condition_variable done_cv_;  // the loop's last chunk finished and its workers left
  bool stop_ = false;
  uint64_t generation_ = 0;  // bumped for each loop
  int active_ = 0;           // workers inside run_chunks

  // The current loop; written under mu_ only while no worker is inside run_chunks.
  aotpack_range_fn fn_ = nullptr;
  void* closure_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, num_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> chunks_done_{0};
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_THREAD_POOL_HPP_
