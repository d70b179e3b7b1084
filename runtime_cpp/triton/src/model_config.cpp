#include "model_config.hpp"

#include "dtypes.hpp"

namespace aotpack_triton {
namespace {

bool Missing(const JsonValue* list) { return !list || !list->is_array() || list->size() == 0; }

JsonValue ConfigTensor(const TensorSpec& t, bool batching) {
  JsonValue tensor = JsonValue::Object();
  tensor.Set("name", JsonValue::String(t.name));
  tensor.Set("data_type", JsonValue::String(ConfigName(t.triton_dtype)));
  JsonValue dims = JsonValue::Array();
  for (size_t d = batching ? 1 : 0; d < t.dims.size(); ++d) dims.Append(JsonValue::Number(t.dims[d].size));
  tensor.Set("dims", std::move(dims));
  return tensor;
}

JsonValue ConfigTensors(const std::vector<TensorSpec>& tensors, bool batching) {
  JsonValue list = JsonValue::Array();
  for (const TensorSpec& t : tensors) list.Append(ConfigTensor(t, batching));
  return list;
}

std::string DimText(const DimSpec& dim) {
  if (dim.size >= 0) return std::to_string(dim.size);
  if (!dim.symbol.empty()) return dim.symbol + " in " + std::to_string(dim.min) + ".." + std::to_string(dim.max);
  return "a size expression";
}

bool CheckTensor(const char* kind, const JsonValue& configured, const std::vector<TensorSpec>& tensors,
                 bool batching, std::string* error) {
  const JsonValue* name = configured.Find("name");
  if (!name || !name->is_string()) {
    *error = std::string("an ") + kind + " of the model configuration has no name";
    return false;
  }
  const TensorSpec* t = nullptr;
  for (const TensorSpec& candidate : tensors) {
    if (candidate.name == name->text()) t = &candidate;
  }
  if (!t) {
    std::string names;
    for (const TensorSpec& candidate : tensors) names += (names.empty() ? "" : ", ") + candidate.name;
    *error = std::string(kind) + " '" + name->text() + "' of the model configuration is not in the package, whose " +
             kind + "s are: " + names;
    return false;
  }
  const std::string where = std::string(kind) + " '" + t->name + "'";
  const JsonValue* data_type = configured.Find("data_type");
  const std::string expected_type = ConfigName(t->triton_dtype);
  if (!data_type || data_type->text() != expected_type) {
    *error = where + ": data_type " + (data_type ? data_type->text() : std::string("(none)")) +
             " but the package's is " + aotpack_dtype_name(t->dtype) + ": write data_type: " + expected_type;
    return false;
  }
  const JsonValue* dims = configured.Find("dims");
  const size_t first = batching ? 1 : 0;
  const size_t expected_rank = t->dims.size() - first;
  if (!dims || !dims->is_array() || dims->size() != expected_rank) {
    *error = where + ": " + std::to_string(dims && dims->is_array() ? dims->size() : 0) + " dims but the package's " +
             kind + " has " + std::to_string(expected_rank) +
             (batching ? " besides the batch dim (max_batch_size > 0 leaves dim 0 out of dims)" : "");
    return false;
  }
  for (size_t d = 0; d < expected_rank; ++d) {
    int64_t size = 0;
    if (!dims->at(d).AsInt(&size)) {
      *error = where + ": dims[" + std::to_string(d) + "] is not an integer";
      return false;
    }
    const DimSpec& dim = t->dims[d + first];
    bool allowed = size == -1 || (dim.size >= 0 ? size == dim.size
                                                : !dim.symbol.empty() && size >= dim.min && size <= dim.max);
    if (!allowed) {
      *error = where + ": dims[" + std::to_string(d) + "] is " + std::to_string(size) + " but the package's dim " +
               std::to_string(d + first) + " is " + DimText(dim) + ": write -1 or a size it allows";
      return false;
    }
  }
  return true;
}

}  // namespace

bool CompleteConfig(const Signature& sig, JsonValue* config) {
  JsonValue* inputs = config->Find("input");
  JsonValue* outputs = config->Find("output");
  const bool no_inputs = Missing(inputs), no_outputs = Missing(outputs);
  if (!no_inputs && !no_outputs) return false;
  int64_t max_batch_size = 0;
  const JsonValue* configured = config->Find("max_batch_size");
  if (configured) configured->AsInt(&max_batch_size);
  if (no_inputs && no_outputs && max_batch_size == 0 && sig.has_batch) {
    max_batch_size = sig.batch.max;
    config->Set("max_batch_size", JsonValue::Number(max_batch_size));
  }
  const bool batching = max_batch_size > 0 && sig.has_batch;
  if (no_inputs) config->Set("input", ConfigTensors(sig.inputs, batching));
  if (no_outputs) config->Set("output", ConfigTensors(sig.outputs, batching));
  return true;
}

bool CheckConfig(const Signature& sig, const JsonValue& config, int64_t* max_batch_size, std::string* error) {
  *max_batch_size = 0;
  const JsonValue* configured = config.Find("max_batch_size");
  if (configured && !configured->AsInt(max_batch_size)) {
    *error = "max_batch_size is not an integer";
    return false;
  }
  if (*max_batch_size < 0) {
    *error = "max_batch_size is negative";
    return false;
  }
  if (*max_batch_size > 0 && !sig.has_batch) {
    *error = "max_batch_size is " + std::to_string(*max_batch_size) +
             " but the package has no batch symbol (one symbol that is dim 0 of every input and output and no "
             "other dim): set max_batch_size: 0 and give every dim in dims";
    return false;
  }
  if (*max_batch_size > sig.batch.max && sig.has_batch) {
    *error = "max_batch_size is " + std::to_string(*max_batch_size) + " but the package's batch symbol " +
             sig.batch.name + " allows at most " + std::to_string(sig.batch.max) + ": lower max_batch_size";
    return false;
  }
  const bool batching = *max_batch_size > 0;
  const JsonValue* inputs = config.Find("input");
  const JsonValue* outputs = config.Find("output");
  for (size_t i = 0; inputs && i < inputs->size(); ++i) {
    if (!CheckTensor("input", inputs->at(i), sig.inputs, batching, error)) return false;
  }
  for (size_t i = 0; outputs && i < outputs->size(); ++i) {
    if (!CheckTensor("output", outputs->at(i), sig.outputs, batching, error)) return false;
  }
  for (const TensorSpec& t : sig.inputs) {
    bool found = false;
    for (size_t i = 0; inputs && i < inputs->size(); ++i) {
      const JsonValue* name = inputs->at(i).Find("name");
      found = found || (name && name->text() == t.name);
    }
    if (!found) {
      *error = "the package's input '" + t.name + "' is not in the model configuration's inputs: add it (or leave "
               "input out of config.pbtxt to have the backend fill it in)";
      return false;
    }
  }
  return true;
}

std::string ConfigParameter(const JsonValue& config, const std::string& key, const std::string& fallback) {
  const JsonValue* parameters = config.Find("parameters");
  const JsonValue* entry = parameters ? parameters->Find(key) : nullptr;
  const JsonValue* value = entry ? entry->Find("string_value") : nullptr;
  return value && value->is_string() ? value->text() : fallback;
}

}  // namespace aotpack_triton
