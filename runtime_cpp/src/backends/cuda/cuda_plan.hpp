// What a package says about CUDA (docs/package-format.md): the manifest's cuda target and program.json's
// "cuda" section, which says which kernel each step launches, with which buffers, symbols and grid. Parsed
// and validated at load, before any device is touched.
#ifndef AOTPACK_SRC_BACKENDS_CUDA_CUDA_PLAN_HPP_
#define AOTPACK_SRC_BACKENDS_CUDA_CUDA_PLAN_HPP_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "expr.hpp"
#include "json.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

struct CudaKernelInfo {
  std::string name;
  std::vector<size_t> symbols;      // program symbols passed after the buffers, in order
  std::vector<std::string> errors;  // message of error-flag value i + 1; empty: the kernel takes no flag
  // Split-K products (docs/package-format.md): after the flag the kernel takes a count per program, zero at
  // every launch (each tile's last program resets its own), and split_tile_bytes of workspace per program;
  // split_programs bounds its launches' programs. 0: it takes neither.
  int64_t split_programs = 0;
  int64_t split_tile_bytes = 0;
};

constexpr size_t kNoKernel = static_cast<size_t>(-1);

// A split-K kernel launched instead of the one its entry names (that kernel's unsplit twin, which a runtime
// without split-K launches): `kernel` is kNoKernel when there is none.
struct CudaSplitLaunch {
  size_t kernel = kNoKernel;
  std::array<Expr, 3> grid;
};

// A step's kernel for the sizes of its deciding size up to `upto` (above the previous variant's).
struct CudaVariant {
  int64_t upto = 0;
  size_t kernel = 0;
  std::array<Expr, 3> grid;
  CudaSplitLaunch split;
};

struct CudaStep {
  size_t kernel = 0;             // index into CudaPlan::kernels: the kernel for sizes above every variant
  std::vector<size_t> args;      // indices into Program::buffers
  std::array<Expr, 3> grid;      // launch grid over the symbols
  Expr size;                     // the deciding size, when the step has variants
  std::vector<CudaVariant> variants;  // ascending `upto`; every one takes the same parameters as `kernel`
  CudaSplitLaunch split;              // launched instead of `kernel` above every variant
};

// The step's own launch and each bucket variant's, as (kernel, grid), the step's own first, each followed by its
// split-K launch where it has one.
std::vector<std::pair<size_t, const std::array<Expr, 3>*>> step_launches(const CudaStep& step);

// The kernel and grid a step launches at these symbol values: the first variant whose bucket holds the
// deciding size, else the step's own; its split-K launch where it has one.
Status choose_variant(const CudaStep& step, const int64_t* symbols, size_t* kernel, const std::array<Expr, 3>** grid);

// What the package says about CUDA, parsed and validated at load (before any device is touched).
struct CudaPlan {
  std::vector<int64_t> archs;  // compute capabilities with cubins, as 10 * major + minor
  int64_t min_driver_version = 0;
  std::string ptx_version;
  std::vector<CudaKernelInfo> kernels;
  std::vector<CudaStep> steps;
};

// Parses the manifest's cuda target and program.json's "cuda" section. *present is false (and OK) when the
// package has no CUDA target.
Status parse_cuda_plan(const json::Value& manifest, const json::Value& program_doc, const Program& program,
                       bool* present, CudaPlan* out);

// The launches checked before any device is touched (parse_cuda_plan runs it): grids within the device limits
// over the declared ranges, a fixed parameter count per kernel, outputs never read-only or aliased, and every
// declared output written. DATA_LOSS naming the step.
Status check_cuda_launches(const Program& program, const CudaPlan& plan);

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CUDA_CUDA_PLAN_HPP_
