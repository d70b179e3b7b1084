// A CUDA session's workspace: a stream and device memory for the declared maxima (the arena, each output and
// each input), each step's launch parameters and a bounded cache of CUDA graphs, one per shape, made at creation
// so that a run allocates nothing (a shape's first run, which records its graph, lets the driver allocate the
// graph). The exception is host I/O's page-locked staging memory: page-locking costs about as much per byte as a
// copy at pageable speed, and the declared maxima can be hundreds of MB (GPT-2's logits at 2048 tokens: 206 MB),
// so it is allocated by the first host-I/O run, for that run's sizes, and grown when a larger shape comes (at
// least doubling, at most to the maxima; the outgrown memory, less than the final size in all, is freed with the
// session); a device-I/O session never has any. Growing it drops the cached graphs, which name the old buffers;
// a run at the maxima first makes every later run allocation-free.
//
// With graphs (the default where the driver has them), the first run at a shape (the tuple of symbol values)
// captures everything the run queues on the stream after its inputs are in place (host-I/O input copies from
// the staging memory, clearing the error flags, every launch, reading the flags back, host-I/O output copies)
// into a graph; later runs at that shape replay it with one cuGraphLaunch. A graph bakes in every pointer, and
// the arena and outputs are fixed per session, so only the inputs could move: a host input is copied into its
// page-locked staging buffer, and a device-I/O run either replays the graph that reads its very pointers in
// place or copies its inputs (cuMemcpyDtoDAsync, before the graph launch) into session-owned buffers that a
// second graph reads (see Graph). The copy costs one driver call per input and the bytes at device bandwidth
// (token ids and masks: microseconds); updating the graph's kernel nodes instead would cost a call per node that
// reads an input and the node handles kept per graph, and a stale pointer if one were missed.
//
// A device-I/O run may also be queued on a caller's stream (enqueue): the same graphs (captured on the session's
// own stream, which only records) or launches go on that stream, followed by an event; nothing waits until
// synchronize or the next synchronous run, which read the error flags the queued runs may have set.
#ifndef AOTPACK_SRC_BACKENDS_CUDA_CUDA_WORKSPACE_HPP_
#define AOTPACK_SRC_BACKENDS_CUDA_CUDA_WORKSPACE_HPP_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cuda_driver.hpp"
#include "cuda_executable.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

// One thread at a time, like its session.
class CudaWorkspace final : public Workspace {
 public:
  CudaWorkspace(const CudaWorkspace&) = delete;
  CudaWorkspace& operator=(const CudaWorkspace&) = delete;
  ~CudaWorkspace() override;

  // With io_memory AOTPACK_MEMORY_DEVICE, inputs are device pointers used in place and outputs stay in
  // device memory (no copies); otherwise the workspace has device memory for the inputs and copies both
  // ways. `executable` is borrowed and must outlive the workspace.
  static Status create(const CudaExecutable& executable, const WorkspaceOptions& options,
                       std::unique_ptr<Workspace>* out);

  // Whether runs replay CUDA graphs (the option, and a driver with the graph API).
  bool graphs() const { return graphs_; }

  aotpack_memory_t io_memory() const override { return device_io_ ? AOTPACK_MEMORY_DEVICE : AOTPACK_MEMORY_HOST; }
  // Device inputs are checked, then bound into the launch parameters (with graphs, run_steps decides whether
  // the run reads them in place or copies them into the session's input buffers first); host inputs are copied
  // into the staging memory (and, without graphs, queued for the device).
  Status bind_inputs(const void* const* inputs, const int64_t* symbols) override;
  // Launches every step on the session's stream, or replays the shape's graph (recording it first).
  Status run_steps(const int64_t* symbols) override;
  // Without graphs, queues the host-I/O output copies; then waits for the stream and reports the first step
  // whose check failed.
  Status collect_outputs(const int64_t* symbols) override;
  // A CUdeviceptr with device I/O, else host memory.
  void* output_data(size_t index) const override;
  // Device I/O only: the run's graph (or launches) on the caller's stream, after a device-side wait for the
  // previous queued run where that went on another stream, then an event that marks the run's end.
  Status queueable() const override;
  Status enqueue(const void* const* inputs, const int64_t* symbols, void* stream) override;
  // Waits for that event and reports the first step whose check failed in the queued runs.
  Status synchronize() override;
  // An event recorded on the caller's stream, which the session's stream waits for (host and device I/O alike).
  Status orderable() const override { return Status(); }
  Status wait_on_device(void* stream) override;

 private:
  CudaWorkspace() = default;
  // A recorded run at one shape. Empty while last_used is 0. With device I/O, a shape's first graph reads the
  // caller's inputs in place, at the pointers it was recorded with (`inputs`), and is replayed only by runs
  // given those same pointers; a run given others copies its inputs into the session's input buffers and
  // replays the shape's graph that reads them (recorded by the first such run). A caller that keeps its input
  // buffers (as a C++ service does) so runs one graph launch of kernels alone, and no stale pointer is replayed.
  struct Graph {
    std::vector<int64_t> symbols;  // the shape, program order (sized at creation)
    bool reads_caller_inputs = false;
    std::vector<cuda::CUdeviceptr> inputs;  // with reads_caller_inputs: the pointers (sized at creation)
    cuda::CUgraphExec exec = nullptr;
    uint64_t last_used = 0;
  };

  // Page-locked host memory for one host-I/O input or output (see above).
  struct Staging {
    void* data = nullptr;
    uint64_t capacity = 0;
    uint64_t max = 0;  // at the declared maxima
  };

  Status alloc(size_t bytes, cuda::CUdeviceptr* out);
  Status alloc_pinned(size_t bytes, const std::string& what, void** out, unsigned int flags = 0);
  Status alloc_error_flags(size_t count);
  Status grow_staging(Staging* staging, uint64_t bytes, const std::string& what, bool* grown);
  Status grow_host_staging(const int64_t* symbols);
  void drop_graphs();
  Status bytes_of(const Buffer& b, const int64_t* symbols, uint64_t* out) const;
  Status alloc_split_workspace();
  Status scratch_at_maxima(const int64_t* maxima, uint64_t* out) const;
  void prepare_launches();
  Status stage_host_inputs(const void* const* host_inputs, const int64_t* symbols);
  Status bind_device_inputs(const void* const* inputs, const int64_t* symbols);
  void point_input_slots_at(bool caller_inputs);
  Status queue_device_input_copies(const int64_t* symbols, cuda::CUstream stream);
  Status replay_or_record(const int64_t* symbols, cuda::CUstream stream);
  Status check_device_input(size_t i, cuda::CUdeviceptr p, uint64_t bytes) const;
  // What a run queues on the stream; with graphs, captured once per shape.
  Status queue_input_copies(const int64_t* symbols);
  Status queue_steps(const int64_t* symbols, cuda::CUstream stream);
  Status queue_output_copies(const int64_t* symbols);
  Status queue_run(const int64_t* symbols);
  Status capture(const int64_t* symbols, cuda::CUgraphExec* out, bool* unsupported);
  Graph* find_graph(const int64_t* symbols, bool reads_caller_inputs);
  bool has_graph(const int64_t* symbols) const;
  Graph* graph_to_replace();
  Status settle_unfinished_run();
  Status settle_queued_runs();
  Status wait_for_queued_runs();
  Status finish();
  Status report_failed_check();

  const CudaExecutable* executable_ = nullptr;
  const Program* program_ = nullptr;
  const CudaDevice* device_ = nullptr;
  bool device_io_ = false;
  bool graphs_ = false;
  // The session's cuda_pdl: launch the kernels that allow it (CudaDevice::Function::programmatic) with
  // programmatic dependent launch. On by default: with graphs, a kernel of a short bucket lets its successor
  // launch while it runs and the others are launched as soon as their predecessor ends: on an H200, 9-17% less
  // wall time at one token, 1-9% at 128, 0-3% from 512 up (docs/performance.md). Off, every kernel goes through cuLaunchKernel,
  // with the same results.
  bool programmatic_ = true;
  cuda::CUstream stream_ = nullptr;
  std::vector<cuda::CUdeviceptr> allocations_;
  std::vector<Staging> host_inputs_;           // per program input, with host I/O
  std::vector<Staging> host_outputs_;          // per program output, with host I/O
  std::vector<void*> retired_staging_;          // outgrown staging memory, freed with the session (grow_staging)
  std::vector<cuda::CUdeviceptr> buffer_ptrs_;  // per program buffer; inputs are 0 with device I/O, no graphs
  // One int32 per step, in page-locked host memory the kernels write through the bus (only a failed check
  // writes one), at error_flags_ for the device and host_flags_ for the host. A run neither clears them on the
  // stream nor copies them back: finish() reads them once the stream is done and clears any it finds set.
  // Before, a memset and a copy did, two more nodes in every graph. run_unfinished_: a run began and did not
  // reach finish()'s wait (it failed), so its copies and kernels may still run (settle_unfinished_run).
  cuda::CUdeviceptr error_flags_ = 0;
  int32_t* host_flags_ = nullptr;
  size_t num_flags_ = 0;
  bool run_unfinished_ = false;
  // Runs queued by enqueue on callers' streams and not waited for yet: queued_done_ (made by the first enqueue)
  // is recorded on queued_stream_ after the last of them. Their kernels may set flags that nobody has read.
  cuda::CUevent queued_done_ = nullptr;
  cuda::CUstream queued_stream_ = nullptr;
  bool queued_ = false;
  // The point of a caller's stream a synchronous run waits for on the device (wait_on_device; made by its first
  // use). Reused by every such run: the session's stream has taken its wait before the next record.
  cuda::CUevent caller_point_ = nullptr;
  // Global scratch shared by the steps (one runs at a time on the stream): the most any launch takes at
  // the declared maxima. 0 when no kernel takes scratch.
  cuda::CUdeviceptr scratch_ = 0;
  uint64_t scratch_capacity_ = 0;
  // Split-K products' counts and partial sums, shared by the steps like scratch_ (the counts are zeroed once
  // here and every launch leaves them zero), sized for the kernel that takes most; 0 when none splits.
  cuda::CUdeviceptr split_counts_ = 0, split_parts_ = 0;
  std::vector<Graph> graph_cache_;              // capacity WorkspaceOptions::graph_cache_size
  uint64_t graph_clock_ = 0;                    // counts runs, for least-recently-used eviction
  // Per step, the launch arguments: buffer pointers, symbol values, flag, and two hidden scratch pointers
  // (Triton 3.3+ global scratch: scratch_ for a kernel that takes it, else null; 3.5+ profile scratch, always
  // null; extra entries are ignored by older cubins).
  // A step whose kernels include split-K ones has a second array with the split pointers after the flag.
  struct Launch {
    std::vector<cuda::CUdeviceptr> pointers;
    std::vector<int64_t> symbols;
    cuda::CUdeviceptr flag = 0, split_counts = 0, split_parts = 0, scratch0 = 0, scratch1 = 0;
    std::vector<void*> params, split_params;
  };
  std::vector<Launch> launches_;
  // Per program input, the launch pointers that name its buffer: with device I/O, each run writes the
  // caller's pointer there.
  std::vector<std::vector<cuda::CUdeviceptr*>> input_slots_;
  std::vector<cuda::CUdeviceptr> run_inputs_;  // with device I/O, this run's input pointers (sized at creation)
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CUDA_CUDA_WORKSPACE_HPP_
