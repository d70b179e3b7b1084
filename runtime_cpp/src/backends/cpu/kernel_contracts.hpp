// A CPU kernel library's table (aotpack_kernel_abi.h) read against the plan: the symbols the kernels were
// generated for, and each kernel's argument contract in the plan's terms (plan_check.hpp), so that every
// step can be checked against the kernel it runs before anything runs.
#ifndef AOTPACK_SRC_BACKENDS_CPU_KERNEL_CONTRACTS_HPP_
#define AOTPACK_SRC_BACKENDS_CPU_KERNEL_CONTRACTS_HPP_

#include <string>

#include "aotpack_kernel_abi.h"
#include "plan_check.hpp"
#include "program.hpp"
#include "status.hpp"

namespace aotpack {

// The kernels read symbols[i] as the table's symbol i: the program must have the same symbols in the same
// order, each range within the one the kernels were generated for. `member` names the library.
Status check_table_symbols(const std::string& member, const aotpack_kernel_table_t& table, const Program& program);

// The entry's contract with its shapes parsed against the program's symbols.
Status kernel_contract(const std::string& member, const aotpack_kernel_entry_t& entry, const Program& program,
                       KernelContract* out);

}  // namespace aotpack

#endif  // AOTPACK_SRC_BACKENDS_CPU_KERNEL_CONTRACTS_HPP_
