// Checks of the plan (program.json, parsed) that hold whatever the target: run before any session exists,
// so that a plan edited consistently with its digests cannot make a kernel read or write outside its memory.
//
//   check_plan_memory   the memory plan alone: arena and buffer sizes bounded by what the declared maxima
//                       need, no two arena buffers live at once on the same bytes.
//   check_step          one step against the contract of the kernel it runs (argument count, each argument's
//                       access, dtype and shape): a function of (step, kernel, args), so that each of a
//                       step's alternative kernels (per-bucket variants) is checked the same way.
//   check_outputs_written  every declared output is written by some step.
//
// Every failure is DATA_LOSS naming program.json's path and what the kernel or the plan says.
#ifndef AOTPACK_SRC_PLAN_CHECK_HPP_
#define AOTPACK_SRC_PLAN_CHECK_HPP_

#include <cstdint>
#include <string>
#include <vector>

#include "aotpack.h"
#include "expr.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

// What a kernel does with one argument, from its library's table (aotpack_kernel_abi.h), its shape parsed
// against the program's symbols.
struct ArgContract {
  bool writes = false;
  aotpack_dtype_t dtype = AOTPACK_DTYPE_FLOAT32;
  std::vector<Expr> shape;
};

struct KernelContract {
  std::string name;
  std::vector<ArgContract> args;
};

// The largest value `e` takes with every symbol in its declared range (interval arithmetic); fails when it
// cannot be bounded (a division by a range holding 0) or overflows int64.
Status expr_upper_bound(const Expr& e, const std::vector<Symbol>& symbols, int64_t* out);

// Bytes of a buffer of `dtype` and `shape` at the symbols' values; UINT64_MAX past 2^64.
Status shape_bytes(aotpack_dtype_t dtype, const std::vector<Expr>& shape, const int64_t* symbols, uint64_t* out);

Status check_plan_memory(const Program& program);

// `where` names the step in messages ("program.json steps[3]").
Status check_step(const Program& program, const std::string& where, const Step& step, const KernelContract& kernel);

// `writes[s][a]`: whether step s writes its argument a (from the steps' kernel contracts).
Status check_outputs_written(const Program& program, const std::vector<std::vector<bool>>& writes);

}  // namespace aotpack

#endif  // AOTPACK_SRC_PLAN_CHECK_HPP_
