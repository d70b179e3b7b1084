// The execution plan of program.json (docs/package-format.md, "program.json"), parsed and validated in full
// before anything in it is trusted: after parse_program succeeds every index, offset and name in it is
// known to be in range.
#ifndef AOTPACK_SRC_PROGRAM_HPP_
#define AOTPACK_SRC_PROGRAM_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aotpack.h"
#include "expr.hpp"
#include "json.hpp"
#include "safetensors.hpp"
#include "status.hpp"

namespace aotpack {

struct Symbol {
  std::string name;
  int64_t min = 0, max = 0;  // inclusive
  size_t input = 0, dim = 0; // the first input dim that is this symbol: where a run binds it
};

enum class BufferKind { kInput, kWeight, kArena, kOutput };

struct Buffer {
  int64_t id = 0;
  BufferKind kind = BufferKind::kArena;
  aotpack_dtype_t dtype = AOTPACK_DTYPE_FLOAT32;
  std::vector<Expr> shape;
  size_t port = 0;      // kInput: index into Program::inputs; kOutput: into Program::outputs
  size_t weight = 0;    // kWeight: index into the weights given to parse_program
  int64_t offset = 0;   // kArena: byte offset in the arena, a multiple of 64
  int64_t max_bytes = 0;  // kArena, kOutput: the most bytes the buffer takes at any symbol values
};

struct Port {
  std::string name;
  size_t buffer = 0;  // index into Program::buffers
};

struct Step {
  std::string kernel;
  std::vector<size_t> args;  // indices into Program::buffers
};

struct Program {
  std::vector<Symbol> symbols;
  std::vector<std::string> symbol_names;  // the same names, for expression parsing and messages
  std::vector<Port> inputs, outputs;
  std::vector<Buffer> buffers;
  int64_t arena_bytes = 0;
  std::vector<Step> steps;
};

constexpr int64_t kArenaAlignment = 64;

// Parses and validates program.json against the tensors of weights.safetensors. Errors are DATA_LOSS and
// name the JSON path ("program.json: buffers[3].offset: ...").
Status parse_program(const json::Value& doc, const std::vector<safetensors::TensorView>& weights, Program* out);

const char* buffer_kind_name(BufferKind kind);

}  // namespace aotpack

#endif  // AOTPACK_SRC_PROGRAM_HPP_
