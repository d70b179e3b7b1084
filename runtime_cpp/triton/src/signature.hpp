// The package's signature as the backend serves it: each input and output with its dims, and the batch
// symbol when there is one. The same rule is in publish/triton.py (batch_symbol); keep the two alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aotpack.h"
#include "triton_api.h"

namespace aotpack_triton {

struct DimSpec {
  int64_t size = -1;   // the fixed size, or -1 for a symbol or (outputs) a size expression
  std::string symbol;  // the symbol's name when the dim is exactly a symbol
  int64_t min = 0, max = 0;
  bool mentions_batch = false;  // outputs: the dim's expression uses the batch symbol
};

struct TensorSpec {
  std::string name;
  aotpack_dtype_t dtype;
  TRITONSERVER_DataType triton_dtype;
  std::vector<DimSpec> dims;
};

// A symbol that is dim 0 of every input and output and appears in no other dim of them: requests can be
// concatenated on dim 0 and the outputs split by rows. Triton's max_batch_size is then its maximum.
struct BatchSymbol {
  std::string name;
  int64_t min = 0, max = 0;
};

struct Signature {
  std::vector<TensorSpec> inputs, outputs;
  bool has_batch = false;
  BatchSymbol batch;
};

// Reads the signature of a loaded model (through the C API and, for output size expressions, the manifest).
// False with *error when the package has a tensor whose dtype Triton cannot carry.
bool ReadSignature(const aotpack_model_t* model, Signature* out, std::string* error);

}  // namespace aotpack_triton
