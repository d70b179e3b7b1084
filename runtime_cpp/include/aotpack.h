/* aotpack runtime C API: load a .aotpack package and run it, with no Python and no libtorch.
 *
 * The stable boundary of the runtime. No C++ exception crosses it and the library never aborts: every
 * failure is a status with a code and a message that says what was wrong and where.
 */
#ifndef AOTPACK_H_
#define AOTPACK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AOTPACK_API __attribute__((visibility("default")))

/* ---- version ------------------------------------------------------------------------------------ */

/* The release these declarations come from (the one place the version is written: CMake, the SONAME
 * libaotpack.so.<MAJOR> and the Python package read it from here). A caller compiled against this header
 * can compare it with aotpack_version(), the library it runs with. */
#define AOTPACK_VERSION_MAJOR 0
#define AOTPACK_VERSION_MINOR 1
#define AOTPACK_VERSION_PATCH 0
#define AOTPACK_VERSION_STRING "0.1.0"

/* The loaded library's version, "MAJOR.MINOR.PATCH". Static storage; never NULL. */
AOTPACK_API const char* aotpack_version(void);

/* ---- status ------------------------------------------------------------------------------------- */

typedef enum aotpack_status_code_t {
  AOTPACK_OK = 0,
  AOTPACK_INVALID_ARGUMENT = 1,   /* the caller passed something wrong (an input's dtype, rank, ...) */
  AOTPACK_OUT_OF_RANGE = 2,       /* a size is outside the declared range of its symbol */
  AOTPACK_NOT_FOUND = 3,          /* a file, a package member or a kernel is missing */
  AOTPACK_UNSUPPORTED = 4,        /* a format version, device or CPU feature this runtime cannot serve */
  AOTPACK_DATA_LOSS = 5,          /* the package is corrupt: bad structure or a digest mismatch */
  AOTPACK_RESOURCE_EXHAUSTED = 6, /* out of memory */
  AOTPACK_INTERNAL = 7,           /* a bug in aotpack: please report it */
} aotpack_status_code_t;

/* A failed call's result. NULL means OK. New reference: the caller frees it with aotpack_status_free. */
typedef struct aotpack_status* aotpack_status_t;

AOTPACK_API aotpack_status_code_t aotpack_status_code(aotpack_status_t status); /* AOTPACK_OK for NULL */
/* Borrowed; valid until the status is freed. "" for NULL. */
AOTPACK_API const char* aotpack_status_message(aotpack_status_t status);
AOTPACK_API void aotpack_status_free(aotpack_status_t status); /* NULL is fine */

/* ---- tensors ------------------------------------------------------------------------------------ */

typedef enum aotpack_dtype_t {
  AOTPACK_DTYPE_FLOAT32 = 0,
  AOTPACK_DTYPE_FLOAT64 = 1,
  AOTPACK_DTYPE_FLOAT16 = 2,
  AOTPACK_DTYPE_BFLOAT16 = 3,
  AOTPACK_DTYPE_INT64 = 4,
  AOTPACK_DTYPE_INT32 = 5,
  AOTPACK_DTYPE_INT16 = 6,
  AOTPACK_DTYPE_INT8 = 7,
  AOTPACK_DTYPE_UINT8 = 8,
  AOTPACK_DTYPE_BOOL = 9,
} aotpack_dtype_t;

AOTPACK_API const char* aotpack_dtype_name(aotpack_dtype_t dtype); /* "float32", ...; "unknown" otherwise */
AOTPACK_API size_t aotpack_dtype_size(aotpack_dtype_t dtype);      /* bytes per element; 0 if unknown */

#define AOTPACK_MAX_RANK 8

/* A dense, contiguous (row-major) tensor. `data` is host memory, or a CUdeviceptr cast to void* when the
 * session's I/O memory is AOTPACK_MEMORY_DEVICE (see aotpack_session_io_memory); `shape` is always host
 * memory. Borrowed: aotpack never frees `shape` or `data`. */
typedef struct aotpack_tensor_t {
  aotpack_dtype_t dtype;
  int32_t rank;
  const int64_t* shape; /* rank entries */
  void* data;
} aotpack_tensor_t;

/* One dimension of a signature: a fixed size, or a symbol with its declared inclusive range. */
typedef struct aotpack_dim_info_t {
  int64_t size;       /* the fixed size, or -1 when the dim is a symbol */
  const char* symbol; /* the symbol's name, or NULL when fixed */
  int64_t min, max;   /* the symbol's range; both equal `size` when fixed */
} aotpack_dim_info_t;

/* An input or output of the model's signature. Borrowed from the model; valid while the model lives. */
typedef struct aotpack_tensor_info_t {
  const char* name;
  aotpack_dtype_t dtype;
  int32_t rank;
  aotpack_dim_info_t dims[AOTPACK_MAX_RANK]; /* outputs: dims that are expressions report size -1, symbol NULL */
} aotpack_tensor_info_t;

/* ---- model -------------------------------------------------------------------------------------- */

/* A loaded package. Immutable after load: safe to share across threads and sessions. */
typedef struct aotpack_model aotpack_model_t;

/* The device type a load may prepare, in prepare_device_type: none (the default). */
#define AOTPACK_PREPARE_NONE (-1)

/* Requiring a signature (docs/registries.md): with a public key set, the package must carry an OpenSSF Model
 * Signing signature by that key, as `aotpack sign --key` writes it, over exactly its members. It is checked
 * when the zip directory has been read, before manifest.json is parsed, any digest thread starts, any weight
 * is used or any kernel library is opened; a member missing, added or changed fails the load naming it
 * (DATA_LOSS), as do a signature by another key and a malformed signature file; no signature file is
 * NOT_FOUND. The check needs OpenSSL's libcrypto (libcrypto.so.3 or .so.1.1, opened at run time; UNSUPPORTED,
 * saying so, without it). The strings are borrowed for the duration of aotpack_model_load only. */
typedef struct aotpack_model_options_t {
  uint32_t struct_size;   /* sizeof(aotpack_model_options_t); set by _init, lets the struct grow */
  int32_t verify_digests; /* 1 (default): check every member's sha256 against the manifest at load */
  /* Added after the fields above (a caller built against the shorter struct gets the defaults). */
  int32_t prepare_device_type;  /* an aotpack_device_type_t, or AOTPACK_PREPARE_NONE (the default): on
                                   AOTPACK_DEVICE_CUDA, the load sets the model up on CUDA device
                                   prepare_device_index (context, cubins, weights upload) while it checks the
                                   digests, instead of at the first session there. A failure there is not the
                                   load's: the session reports it. */
  int32_t prepare_device_index; /* default 0 */
  const char* public_key_path; /* a trusted PEM public key file; NULL (default): no signature is required */
  const char* public_key_pem;  /* or the PEM text itself, NUL-terminated; at most one of the two is set */
  const char* signature_path;  /* the signature file; NULL (default): "<path>.sig", where `aotpack sign` puts it */
} aotpack_model_options_t;

AOTPACK_API void aotpack_model_options_init(aotpack_model_options_t* options);

/* Maps the package at `path` (a .aotpack file), checks its signature first when the options give a public
 * key, validates its structure and, unless disabled, its digests, and loads its CPU kernel library. The
 * digests are hashed on background threads while the rest of the load goes on (each member is used only once
 * its digest matched, except the weights, which are only parsed by a validating reader or copied to a prepared
 * device meanwhile); the load succeeds only when all matched. `options` may be NULL for the defaults. On success *out is a
 * new model, release it with aotpack_model_release. */
AOTPACK_API aotpack_status_t aotpack_model_load(const char* path, const aotpack_model_options_t* options,
                                                aotpack_model_t** out);
/* Drops the caller's reference; sessions hold their own, so the model is freed when the last of them is
 * destroyed. NULL is fine. */
AOTPACK_API void aotpack_model_release(aotpack_model_t* model);

AOTPACK_API size_t aotpack_model_num_inputs(const aotpack_model_t* model);
AOTPACK_API size_t aotpack_model_num_outputs(const aotpack_model_t* model);
AOTPACK_API aotpack_status_t aotpack_model_input_info(const aotpack_model_t* model, size_t index,
                                                      aotpack_tensor_info_t* out);
AOTPACK_API aotpack_status_t aotpack_model_output_info(const aotpack_model_t* model, size_t index,
                                                       aotpack_tensor_info_t* out);
/* The package's manifest.json text. Borrowed from the model. */
AOTPACK_API const char* aotpack_model_manifest(const aotpack_model_t* model);
/* The package digest, "sha256:<64 hex digits>" of manifest.json's bytes as stored (what `aotpack inspect`
 * prints; docs/registries.md). Borrowed from the model, valid while it lives; "" for NULL. */
AOTPACK_API const char* aotpack_model_digest(const aotpack_model_t* model);
/* "sha256:<hex>" of the weights the model runs: its package's weights.safetensors (the manifest's record of it),
 * or, for a model made by aotpack_model_refit, of the bytes given there (so equal to the weights member of the
 * package `aotpack refit` writes from them). Borrowed from the model, valid while it lives; "" for NULL. */
AOTPACK_API const char* aotpack_model_weights_digest(const aotpack_model_t* model);

/* Swapping weights without reloading, for services that refit in place. Makes *out, a new model that runs
 * `model`'s kernels and plan (shared with it, not reloaded) with the weights in the safetensors file held in
 * [safetensors_bytes, +size), which are copied (borrowed for the call only). They must be the package's own
 * tensors, as `aotpack refit` writes its weights.safetensors: the same names, dtypes and shapes, including the
 * tensors export lays out for the kernels (e.g. `*.panels16`); otherwise INVALID_ARGUMENT lists every
 * mismatch (DATA_LOSS for bytes that are not a safetensors file). Neither model changes: a session sees the
 * weights of the model it was created from for its whole life, so a run never sees a mix; a service swaps
 * by creating new sessions from *out, then destroying the old sessions and releasing the old model (in any
 * order with *out: the shared parts live until both are released). *out reports the same manifest and
 * package digest as `model` (the package its kernels come from) and its own aotpack_model_weights_digest.
 * CPU sessions only for now: a CUDA session of a refitted model is UNSUPPORTED (CUDA uploads a package's
 * weights once per model and device). Thread-safe: `model` is only read. On success release *out with
 * aotpack_model_release. */
AOTPACK_API aotpack_status_t aotpack_model_refit(const aotpack_model_t* model, const void* safetensors_bytes,
                                                 size_t size, aotpack_model_t** out);

/* ---- session ------------------------------------------------------------------------------------ */

/* Scratch memory and threads for running a model. One thread at a time; create one per concurrent caller.
 * A call of aotpack_session_run or aotpack_session_output made while another thread is inside either on the same
 * session fails with INVALID_ARGUMENT (saying so) and changes nothing; destroying a session another thread is
 * using is not detected. */
typedef struct aotpack_session aotpack_session_t;

typedef enum aotpack_device_type_t {
  AOTPACK_DEVICE_CPU = 0,
  AOTPACK_DEVICE_CUDA = 1,
} aotpack_device_type_t;

/* Where a session's run takes its inputs and where it returns its outputs. */
typedef enum aotpack_memory_t {
  AOTPACK_MEMORY_HOST = 0,   /* host memory, on every device (the default) */
  AOTPACK_MEMORY_DEVICE = 1, /* the session device's own memory: no copies between host and device */
} aotpack_memory_t;

/* AOTPACK_DEVICE_CUDA: the package must have been exported with CUDA kernels (--target cuda or cpu,cuda) for
 * the device's compute capability; the NVIDIA driver (libcuda.so.1) is opened at run time, so this library
 * needs no CUDA to be built or loaded. The first CUDA session of a model on a device loads the model's
 * cubins and uploads its weights there (once per model and device); each session then owns a CUDA stream
 * (in the device's primary context) and device memory for the declared maxima (arena, outputs, and inputs
 * with host I/O), allocated at creation. aotpack_session_run runs every kernel on the session's stream and
 * waits for the stream before returning, on either kind of I/O memory:
 *
 * - AOTPACK_MEMORY_HOST: run copies the host inputs to the device asynchronously on the session's stream and
 *   the outputs back into host memory the session owns; aotpack_session_output gives host pointers.
 * - AOTPACK_MEMORY_DEVICE: each input's `data` is a CUdeviceptr on the session's device (allocated in its
 *   primary context, as the CUDA runtime and PyTorch do, or managed memory), at least 16-byte aligned (the
 *   kernels assume it) and holding the whole tensor; kernels read it in place, with no copy. run checks each
 *   pointer with cuPointerGetAttributes and fails with INVALID_ARGUMENT, naming the input, for a NULL,
 *   misaligned, host or other-device pointer or an allocation too short for the tensor. The inputs must be
 *   complete when run is called: the session's stream does not wait for other streams (synchronize the
 *   work that wrote them first). aotpack_session_output gives CUdeviceptr values into the session's output
 *   memory, complete when run returns; the next run overwrites them, so work reading them on other streams
 *   must have finished by then.
 *
 * CUDA graphs (cuda_graphs = 1, the default, where the driver has the graph API): the first run at a shape (the
 * values of the model's symbols) records the run's work into a CUDA graph (its capture, which lets the driver
 * allocate) and later runs at that shape replay it with one launch, so a run costs its kernels' time and not
 * one launch per kernel. A session keeps the graphs of its cuda_graph_cache_size most recently used shapes.
 * Every check works as without graphs: inputs and ranges are checked each run, kernels' index checks
 * reported. Host-I/O inputs are staged in page-locked memory, which the graph copies from. With device I/O, a
 * shape's first graph reads the caller's inputs in place and replays only for runs given the same pointers (no
 * copy: keep the input buffers from run to run); a run given other pointers copies its inputs into session-owned
 * memory on the session's stream (one device copy per input) and replays the shape's graph that reads that.
 *
 * Programmatic dependent launch (cuda_pdl = 1, the default): kernels the package marks "pdl" (sm_90+
 * packages: each begins by waiting for its predecessor) are launched with programmatic dependent launch on an
 * sm_90+ device whose driver has cuLaunchKernelEx, in graphs and out of them; cuda_pdl = 0 launches every
 * kernel with cuLaunchKernel. Results are the same either way. It is on by default because, with graphs, a
 * kernel of a short bucket lets its successor launch while it runs and the others are launched as soon as
 * their predecessor ends: on an H200, 9-17% less wall time at one token, 1-9% at 128, 0-3% from 512 up
 * (docs/performance.md).
 *
 * Host I/O goes through page-locked (pinned) memory the session owns: the copies run asynchronously at full
 * bandwidth, and aotpack_session_output points into that memory. The first host-I/O run allocates it for its
 * sizes and a run at a larger shape grows it (at least doubling, at most to the declared maxima), so those runs
 * allocate; a run at the maxima first makes every later run allocation-free. Device I/O needs none.
 *
 * On AOTPACK_DEVICE_CPU the device's memory is host memory: AOTPACK_MEMORY_DEVICE is accepted and means
 * AOTPACK_MEMORY_HOST, which is what aotpack_session_io_memory reports. */
typedef struct aotpack_session_options_t {
  uint32_t struct_size;              /* sizeof(aotpack_session_options_t); set by _init */
  aotpack_device_type_t device_type; /* default AOTPACK_DEVICE_CPU */
  int32_t device_index;              /* default 0; the CUDA device ordinal for AOTPACK_DEVICE_CUDA */
  int32_t num_threads;               /* CPU threads kernels may use; default 1 */
  aotpack_memory_t io_memory;        /* where inputs and outputs are; default AOTPACK_MEMORY_HOST */
  /* Added after the fields above (a caller built against the shorter struct gets the defaults). */
  int32_t cuda_graphs;           /* 1 (default): replay a CUDA graph per shape; 0: launch every step each run */
  int32_t cuda_graph_cache_size; /* graphs a session keeps, least recently used evicted (one a shape, or two
                                    for a device-I/O shape whose runs move their inputs); default 64, 1..65536 */
  /* Added after cuda_graph_cache_size (a caller built against the shorter struct gets the default). */
  int32_t cuda_pdl; /* 1 (default): programmatic dependent launch for the kernels marked "pdl"; 0: none */
} aotpack_session_options_t;

AOTPACK_API void aotpack_session_options_init(aotpack_session_options_t* options);

/* Allocates the session's arena and output memory for the declared maxima, so a run allocates nothing.
 * On CUDA, UNSUPPORTED when the driver or device is missing, the package has no cubins for the device's
 * compute capability (the message names both) or the driver is older than the cubins need.
 * The session keeps `model` alive (a reference of its own) until it is destroyed. On success *out is a new session, destroy it with
 * aotpack_session_destroy. */
AOTPACK_API aotpack_status_t aotpack_session_create(const aotpack_model_t* model,
                                                    const aotpack_session_options_t* options,
                                                    aotpack_session_t** out);
AOTPACK_API void aotpack_session_destroy(aotpack_session_t* session); /* NULL is fine */

/* Where the session's run takes inputs and returns outputs: the options' io_memory, except that a CPU
 * session always says AOTPACK_MEMORY_HOST. AOTPACK_MEMORY_HOST for NULL. */
AOTPACK_API aotpack_memory_t aotpack_session_io_memory(const aotpack_session_t* session);

/* Runs the model on `inputs`, given in signature order (see aotpack_model_input_info), in the session's
 * I/O memory. Checks every input's dtype, rank and dims (and, for device memory, its pointer), binds the
 * symbols and checks their ranges before any kernel runs. */
AOTPACK_API aotpack_status_t aotpack_session_run(aotpack_session_t* session, const aotpack_tensor_t* inputs,
                                                 size_t num_inputs);

/* aotpack_session_run, ordered after the work queued on `cuda_stream` so far (a CUstream of the session's device,
 * in its primary context, as for aotpack_session_enqueue; 0 is the legacy default stream): the session's own
 * stream waits for that point on the device (an event), not the host, and the call returns when the run has ended,
 * as aotpack_session_run does. For a caller whose inputs are written on a stream of its own, or who reads the
 * previous run's outputs on one (PyTorch's current stream, say): aotpack_session_run would need the host to wait
 * for that stream first. The run stays on the session's stream, so sessions used from several threads still run
 * concurrently (aotpack_session_enqueue instead puts the run on `cuda_stream` itself and does not wait).
 * UNSUPPORTED on the CPU. */
AOTPACK_API aotpack_status_t aotpack_session_run_after(aotpack_session_t* session, const aotpack_tensor_t* inputs,
                                                       size_t num_inputs, void* cuda_stream);

/* Stream-ordered runs (CUDA, device I/O), as a service that keeps its tensors and its own work on CUDA streams
 * wants them: aotpack_session_enqueue checks the inputs, binds the symbols and checks their ranges and pointers
 * like aotpack_session_run, then queues the run on `cuda_stream` (a CUstream of the session's device, in its
 * primary context, as the CUDA runtime's and PyTorch's streams are; 0 is the legacy default stream) and returns
 * without waiting. The run starts after the work queued on that stream before the call (so the inputs may still
 * be being written there), and work queued there after the call starts after it: the outputs
 * (aotpack_session_output) may be read on that stream from then on, or anywhere once the stream has reached that
 * point. With graphs, the same graphs are replayed as by aotpack_session_run, launched on that stream.
 *
 * Runs may be queued one after another without waiting. They share the session's memory: each run overwrites
 * the previous run's outputs, so read those on the same stream before the next run is queued; a run queued on
 * another stream than the previous one waits for it on the device (not here). A check that fails in a kernel
 * (an index out of range) cannot be known when enqueue returns: aotpack_session_synchronize waits for every run
 * queued since the last such wait and returns the first failure among them. A queued run's failure is never
 * lost: aotpack_session_run waits for the queued runs first and, if one of them failed, returns that failure
 * without running. Destroying a session waits for its queued runs.
 *
 * INVALID_ARGUMENT for a host-I/O session (its outputs are copied to host memory, which needs a wait: use
 * aotpack_session_run) and UNSUPPORTED on the CPU; a failure to queue (a bad stream) waits for whatever part of
 * the run was queued before returning. */
AOTPACK_API aotpack_status_t aotpack_session_enqueue(aotpack_session_t* session, const aotpack_tensor_t* inputs,
                                                     size_t num_inputs, void* cuda_stream);

/* Waits for the runs aotpack_session_enqueue queued since the last wait and returns the first check that failed
 * in them (INVALID_ARGUMENT, naming the step, as aotpack_session_run would). OK at once when none is queued, and
 * on the CPU. */
AOTPACK_API aotpack_status_t aotpack_session_synchronize(aotpack_session_t* session);

/* The index-th output of the last successful run, in the session's I/O memory (`data` is a CUdeviceptr for
 * AOTPACK_MEMORY_DEVICE on CUDA). Borrowed from the session: `shape` and `data` stay valid until the next run
 * or until the session is destroyed. After aotpack_session_enqueue, the outputs are those of the queued run:
 * written when the stream reaches the end of it. */
AOTPACK_API aotpack_status_t aotpack_session_output(const aotpack_session_t* session, size_t index,
                                                    aotpack_tensor_t* out);

#ifdef __cplusplus
}
#endif

#endif /* AOTPACK_H_ */
