// The interface every target implements (in the manner of ggml's backend interface and IREE's HAL): the model
// and the session are written against it and never ask which target they run on.
//
//   Backend     one per target kind, a constant table of functions (backends/<kind>/): loads its part of a
//               package into an Executable, and says why a session cannot have one.
//   Executable  a package's kernels for one target, loaded with the model; immutable, shared by sessions.
//               Makes workspaces; uploads the constants where the target needs them (once per device).
//   Workspace   a session's memory and queue on the target: arena, output memory, threads or stream, all
//               made at creation. Moves inputs in, runs the step list, moves outputs out, allocating nothing.
//
// Adding a target is a folder backends/<kind>/ with a sources.cmake and a `const Backend& <kind>_backend()`,
// and its name in AOTPACK_BACKENDS (CMakeLists.txt), which generates the registry (backend_registry.cpp).
#ifndef AOTPACK_SRC_BACKEND_HPP_
#define AOTPACK_SRC_BACKEND_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "aotpack.h"
#include "json.hpp"
#include "package.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

// What a backend reads of a package while it loads. All borrowed from the model, which outlives every
// executable and workspace made from it; `program_doc` only for the duration of Backend::load.
struct PackageParts {
  const Package* package;                      // the container: manifest and members (kernel binaries)
  const json::Value* program_doc;              // program.json as parsed, for a target's own section
  const Program* program;                      // the target-free plan: symbols, buffers, steps
  const std::vector<const void*>* weight_data; // host data per program buffer (aligned); null for other kinds
};

// A session's options, checked by the session before they get here.
struct WorkspaceOptions {
  int device_index = 0;
  int num_threads = 1;                          // 1..1024
  aotpack_memory_t io_memory = AOTPACK_MEMORY_HOST;
  // Where the target can record a shape's run once and replay it (CUDA graphs): whether to, and how many
  // shapes' recordings to keep (least recently used evicted). Targets without recordings ignore both.
  bool graphs = true;
  int graph_cache_size = 64;  // 1..65536
  // Where the target can let a kernel launch while its predecessor finishes (CUDA's programmatic dependent
  // launch, for the kernels the package marks): whether to. Targets without it ignore it.
  bool programmatic_launch = true;
};

// A session's state on its target. One thread at a time, like its session.
class Workspace {
 public:
  virtual ~Workspace() = default;

  // Where run takes inputs and output_data points: AOTPACK_MEMORY_DEVICE only where the target's memory is
  // not host memory and the session asked for it.
  virtual aotpack_memory_t io_memory() const = 0;

  // One run is these three calls in order, each allocating nothing unless it fails. `inputs[i]` is input
  // i's data (in io_memory(); its dtype and shape already checked against the signature, non-null when
  // non-empty) and `symbols` the run's symbol values, program order; both stay valid for the whole run.
  //   bind_inputs:     copies the inputs to the target, or binds them in place.
  //   run_steps:       runs the program's step list.
  //   collect_outputs: makes every output readable at output_data() and waits for the run to end; a kernel's
  //                    failure that the target reports late is returned here.
  virtual Status bind_inputs(const void* const* inputs, const int64_t* symbols) = 0;
  virtual Status run_steps(const int64_t* symbols) = 0;
  virtual Status collect_outputs(const int64_t* symbols) = 0;

  // Output `index`'s data, in io_memory(), sized for the declared maxima; valid until the next run.
  virtual void* output_data(size_t index) const = 0;

  // A stream-ordered run (aotpack_session_enqueue), instead of the three calls above: the inputs bound and the
  // steps queued on the caller's `stream`, after the work already there, returning without waiting. A kernel's
  // failure is reported by synchronize, which waits for the runs queued so far (OK when there are none); a later
  // bind_inputs waits for them too, and fails with a queued run's failure. Targets without streams have neither;
  // queueable says why not (asked before the run's inputs are checked).
  virtual Status queueable() const {
    return unsupported("aotpack_session_enqueue queues a run on a CUDA stream, and this session runs on the CPU: "
                       "call aotpack_session_run");
  }
  virtual Status enqueue(const void* const* inputs, const int64_t* symbols, void* stream) {
    (void)inputs, (void)symbols, (void)stream;
    return queueable();
  }
  virtual Status synchronize() { return Status(); }

  // A synchronous run ordered after a caller's stream (aotpack_session_run_after): between bind_inputs and
  // run_steps, wait_on_device makes the run's work start after the work queued on `stream` so far, by a wait on
  // the device. Targets without streams have neither; orderable says why not (asked before the run's inputs
  // are checked).
  virtual Status orderable() const {
    return unsupported("aotpack_session_run_after orders a run after a CUDA stream, and this session runs on the "
                       "CPU: call aotpack_session_run");
  }
  virtual Status wait_on_device(void* stream) {
    (void)stream;
    return orderable();
  }
};

// A package's kernels for one target. Immutable once loaded (device set-up is internally synchronised):
// safe to share across threads and sessions.
class Executable {
 public:
  virtual ~Executable() = default;

  // A new workspace: its memory for the declared maxima, and the constants on the device it runs on.
  virtual Status create_workspace(const WorkspaceOptions& options, std::unique_ptr<Workspace>* out) const = 0;

  // Sets up device `device_index` now (what the first workspace there would do: constants uploaded, kernels
  // loaded), so that a load can overlap it with checking the digests. Nothing for targets without such set-up.
  virtual Status prepare(int /*device_index*/) const { return Status(); }

  // The same, with the weight buffers' host data taken from `weight_data` (per program buffer, aligned, as
  // PackageParts::weight_data; borrowed, must outlive the workspace) instead of the package's: a refitted
  // model's (aotpack_model_refit). A target that keeps the package's weights on its device says UNSUPPORTED.
  virtual Status create_workspace_with_weights(const WorkspaceOptions& options,
                                               const std::vector<const void*>& weight_data,
                                               std::unique_ptr<Workspace>* out) const {
    (void)options, (void)weight_data, (void)out;
    return unsupported("this model's weights were swapped by aotpack_model_refit, which only CPU sessions run so "
                       "far (this device keeps the package's weights uploaded once per model); load the package "
                       "that `aotpack refit` writes to run the new weights here");
  }
};

// A target kind. Constant, one per backend folder; listed in the registry.
struct Backend {
  const char* kind;                    // the manifest's targets[].kind: "cpu", "cuda"
  aotpack_device_type_t device_type;   // the sessions it serves

  // Loads the package's part for this target. OK with *out null when the package has no such target;
  // a failure says why this host cannot use the part.
  Status (*load)(const PackageParts& parts, std::unique_ptr<Executable>* out);
  // Whether a failed load still lets the package load for its other targets (the session then says why).
  bool (*load_failure_is_tolerable)(const Status& failure);
  // What session creation returns when the package has no usable part for this target: `why` is the
  // load's failure, or OK when the package has no such target.
  Status (*unavailable)(const Status& why);
  // The device index check that comes before any other option's (the devices are set up later).
  Status (*check_device_index)(int device_index);
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKEND_HPP_
