#include "thread_pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <system_error>

namespace aotpack {
namespace {

thread_local bool t_in_parallel_for = false;
thread_local void* t_scratch = nullptr;  // the current chunk's thread's scratch, inside run_chunks

}  // namespace

void ThreadPool::FreeDeleter::operator()(void* p) const { free(p); }

Status ThreadPool::create(int num_threads, int64_t scratch_bytes, std::unique_ptr<ThreadPool>* out) {
  if (num_threads < 1) return invalid_argument("num_threads must be at least 1, got ", num_threads);
  if (scratch_bytes < 0) return invalid_argument("negative kernel scratch size ", scratch_bytes);
  std::unique_ptr<ThreadPool> pool(new ThreadPool(num_threads));
  const size_t bytes = static_cast<size_t>((std::max<int64_t>(scratch_bytes, 64) + 63) / 64 * 64);
  for (int i = 0; i < num_threads; ++i) {
    void* block = nullptr;
    if (posix_memalign(&block, 64, bytes) != 0)
      return resource_exhausted("cannot allocate ", bytes, " bytes of kernel scratch for each of ", num_threads,
                                " threads");
    pool->scratch_.emplace_back(block);
  }
  try {
    for (int i = 1; i < num_threads; ++i) pool->threads_.emplace_back([p = pool.get(), i] { p->worker(i); });
  } catch (const std::system_error& e) {
    return resource_exhausted("cannot start ", num_threads, " threads: ", e.what());
  }
  *out = std::move(pool);
  return Status();
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void* ThreadPool::scratch() const { return t_in_parallel_for ? t_scratch : scratch_[0].get(); }

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    ++active_;
    lock.unlock();
    run_chunks(index);
    lock.lock();
    --active_;
    if (active_ == 0) done_cv_.notify_all();
  }
}

void ThreadPool::run_chunks(int index) {
  t_in_parallel_for = true;
  t_scratch = scratch_[index].get();
  for (;;) {
    int64_t c = next_chunk_.fetch_add(1);
    if (c >= num_chunks_) break;
    int64_t begin = c * chunk_;
    int64_t end = std::min(n_, begin + chunk_);
    fn_(closure_, begin, end);
    chunks_done_.fetch_add(1);
  }
  t_in_parallel_for = false;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, aotpack_range_fn fn, void* closure) {
  if (n <= 0 || !fn) return;
  grain = std::max<int64_t>(grain, 1);
  if (num_threads_ == 1 || n <= grain || t_in_parallel_for) {
    fn(closure, 0, n);
    return;
  }
  // A few chunks per thread balance uneven work; never below the kernel's grain.
  int64_t chunk = std::max(grain, (n + 4 * int64_t{num_threads_} - 1) / (4 * int64_t{num_threads_}));
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A worker that woke late for the previous loop may still be inside run_chunks, finding nothing to do.
    done_cv_.wait(lock, [&] { return active_ == 0; });
    fn_ = fn;
    closure_ = closure;
    n_ = n;
    chunk_ = chunk;
    num_chunks_ = (n + chunk - 1) / chunk;
    next_chunk_.store(0);
    chunks_done_.store(0);
    ++generation_;
  }
  work_cv_.notify_all();
  run_chunks(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return active_ == 0 && chunks_done_.load() == num_chunks_; });
}

}  // namespace aotpack
