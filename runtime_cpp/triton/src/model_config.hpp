// Triton's model configuration (its ModelConfig message as JSON) against the package's signature: filling in
// what config.pbtxt leaves out (auto-complete) and checking what it says.
#pragma once

#include <cstdint>
#include <string>

#include "json_value.hpp"
#include "signature.hpp"

namespace aotpack_triton {

// Fills in, from the signature, the inputs and outputs the configuration leaves out and, when it leaves
// out both and sets no max_batch_size, max_batch_size (the batch symbol's maximum; 0 without one). Config
// dims are the package's with -1 for every symbol or size expression, less dim 0 when batching. Returns
// whether it changed the configuration.
bool CompleteConfig(const Signature& sig, JsonValue* config);

// Checks the configuration against the package: every package input configured, every configured tensor a
// package tensor with its data type and dims (a -1, or a size that the package's dim allows), and a
// max_batch_size only for a package with a batch symbol, at most its maximum. On success *max_batch_size is
// the configuration's; on failure *error names the tensor and field and says what to write instead.
bool CheckConfig(const Signature& sig, const JsonValue& config, int64_t* max_batch_size, std::string* error);

// A parameters entry's string_value, or `fallback` when the configuration has none.
std::string ConfigParameter(const JsonValue& config, const std::string& key, const std::string& fallback);

}  // namespace aotpack_triton
