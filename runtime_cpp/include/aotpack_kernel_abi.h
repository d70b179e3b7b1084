/* aotpack kernel ABI: the boundary between the runtime and a package's generated kernel library.
 *
 * Generated CPU kernels (cpu/<isa>/kernels.so) include this header; the runtime calls them through it.
 * Changing anything here is a breaking change of the package format: bump AOTPACK_KERNEL_ABI_VERSION.
 */
#ifndef AOTPACK_KERNEL_ABI_H_
#define AOTPACK_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AOTPACK_KERNEL_ABI_VERSION 1

/* A chunk of work: the half-open index range [begin, end) of a parallel loop. */
typedef void (*aotpack_range_fn)(void* closure, int64_t begin, int64_t end);

/* What a kernel may ask of the runtime during one step. Owned by the runtime; valid during the call only. */
typedef struct aotpack_kernel_ctx {
  int32_t abi_version; /* AOTPACK_KERNEL_ABI_VERSION of the runtime */
  int32_t num_threads; /* threads parallel_for may use, >= 1 */
  /* Runs fn over [0, n) in chunks of at least `grain` indices on the session's threads and returns when
   * every chunk is done. Chunks never overlap; fn must not call parallel_for itself. */
  void (*parallel_for)(const struct aotpack_kernel_ctx* ctx, int64_t n, int64_t grain, aotpack_range_fn fn,
                       void* closure);
  /* Records an error a kernel found in the data (say, an index out of range); the run then fails with the
   * first message recorded. Thread-safe. The kernel keeps going on clamped values and must not crash. */
  void (*report_error)(const struct aotpack_kernel_ctx* ctx, const char* message);
  void* runtime; /* opaque to kernels */
  /* The calling thread's scratch memory: at least aotpack_kernel_scratch_bytes() bytes (below), 64-byte
   * aligned, private to the thread until the current chunk (or, outside parallel_for, the kernel) returns.
   * Sessions allocate it for every thread when they are created, so kernels never allocate. */
  void* (*thread_scratch)(const struct aotpack_kernel_ctx* ctx);
} aotpack_kernel_ctx;

/* Every kernel has this signature. `buffers` holds one base pointer per argument, in the order the step
 * lists them; views (offsets and strides) are computed inside the kernel. `symbols` holds the current
 * value of every program symbol, in program order. */
typedef void (*aotpack_kernel_fn)(const aotpack_kernel_ctx* ctx, void* const* buffers, const int64_t* symbols);

/* The library also exports `int32_t aotpack_kernel_abi_version(void)` returning the version it was
 * built against, so the runtime can refuse a library of another ABI before calling any kernel. */
typedef int32_t (*aotpack_kernel_abi_version_fn)(void);

/* A library may export `int64_t aotpack_kernel_scratch_bytes(void)`: the scratch its kernels need per
 * thread (see thread_scratch). A library that does not export it needs none. */
typedef int64_t (*aotpack_kernel_scratch_bytes_fn)(void);

/* ---- the kernel table ------------------------------------------------------------------------------
 *
 * A library exports `const aotpack_kernel_table_t aotpack_kernel_table`: every kernel it defines with the
 * contract of each argument. The runtime resolves a step's kernel only in this table (never by looking a name
 * up through the library's dependencies) and, before anything runs, checks every step of the plan against it:
 * the argument count, and each argument's access, dtype and shape against the buffer the step binds there.
 * The table was added to format version 1 without changing how kernels are called, so
 * AOTPACK_KERNEL_ABI_VERSION stays 1; a library without it was exported before it existed (docs/COMPATIBILITY.md
 * says how the runtime serves those). Changing the structs below bumps AOTPACK_KERNEL_TABLE_VERSION. */

#define AOTPACK_KERNEL_TABLE_VERSION 1

/* How a kernel uses an argument. */
typedef enum aotpack_kernel_access_t {
  AOTPACK_ACCESS_READ = 0,  /* only read: may be an input, a weight or an earlier step's result */
  AOTPACK_ACCESS_WRITE = 1, /* written (and maybe read): must be an arena or output buffer, never a constant */
} aotpack_kernel_access_t;

/* One argument: the buffer the kernel was generated for. */
typedef struct aotpack_kernel_arg_t {
  int32_t access; /* an aotpack_kernel_access_t */
  int32_t dtype;  /* an aotpack_dtype_t (aotpack.h) */
  /* The buffer's shape in program.json's JSON form (docs/package-format.md, "Size expressions"), e.g.
   * "[\"batch\",64]": the kernel touches no byte of the argument beyond that shape's size. */
  const char* shape;
} aotpack_kernel_arg_t;

typedef struct aotpack_kernel_entry_t {
  const char* name;   /* what program.json's steps[].kernel names */
  aotpack_kernel_fn fn;
  int32_t num_args;
  const aotpack_kernel_arg_t* args; /* num_args entries, in the order the step passes the buffers */
  int64_t scratch_bytes;          /* per-thread scratch it uses (at most aotpack_kernel_scratch_bytes()) */
} aotpack_kernel_entry_t;

/* A symbol the kernels were generated for: they read symbols[i] as this one, and may rely on its range. */
typedef struct aotpack_kernel_symbol_t {
  const char* name;
  int64_t min, max;
} aotpack_kernel_symbol_t;

typedef struct aotpack_kernel_table_t {
  int32_t version; /* AOTPACK_KERNEL_TABLE_VERSION */
  int32_t num_kernels;
  const aotpack_kernel_entry_t* kernels;
  int32_t num_symbols;
  const aotpack_kernel_symbol_t* symbols; /* program order */
} aotpack_kernel_table_t;

#ifdef __cplusplus
}
#endif

#endif /* AOTPACK_KERNEL_ABI_H_ */
