#include "signature.hpp"

#include "dtypes.hpp"
#include "json_value.hpp"

namespace aotpack_triton {
namespace {

// True when the JSON size expression (an integer, a symbol name or [op, a, b, ...]) uses `symbol`.
bool Mentions(const JsonValue& expr, const std::string& symbol) {
  if (expr.is_string()) return expr.text() == symbol;
  if (expr.is_array()) {
    for (size_t i = 1; i < expr.size(); ++i) {  // item 0 is the operator
      if (Mentions(expr.at(i), symbol)) return true;
    }
  }
  return false;
}

bool ReadTensors(const aotpack_model_t* model, bool outputs, std::vector<TensorSpec>* out, std::string* error) {
  size_t count = outputs ? aotpack_model_num_outputs(model) : aotpack_model_num_inputs(model);
  for (size_t i = 0; i < count; ++i) {
    aotpack_tensor_info_t info;
    aotpack_status_t status = outputs ? aotpack_model_output_info(model, i, &info)
                                      : aotpack_model_input_info(model, i, &info);
    if (status) {
      *error = aotpack_status_message(status);
      aotpack_status_free(status);
      return false;
    }
    const DtypeSpelling* dtype = FindDtype(info.dtype);
    if (!dtype) {
      *error = std::string(outputs ? "output " : "input ") + info.name + ": dtype " +
               aotpack_dtype_name(info.dtype) + " has no Triton data type";
      return false;
    }
    TensorSpec t;
    t.name = info.name;
    t.dtype = info.dtype;
    t.triton_dtype = dtype->triton;
    for (int32_t d = 0; d < info.rank; ++d) {
      DimSpec dim;
      dim.size = info.dims[d].size;
      if (info.dims[d].symbol) dim.symbol = info.dims[d].symbol;
      dim.min = info.dims[d].min;
      dim.max = info.dims[d].max;
      t.dims.push_back(dim);
    }
    out->push_back(std::move(t));
  }
  return true;
}

// The batch rule of signature.hpp; fills sig->batch when a symbol satisfies it.
void FindBatchSymbol(const JsonValue* manifest_outputs, Signature* sig) {
  if (sig->inputs.empty() || sig->outputs.empty()) return;
  const TensorSpec& first = sig->inputs[0];
  if (first.dims.empty() || first.dims[0].symbol.empty()) return;
  const std::string symbol = first.dims[0].symbol;
  for (const TensorSpec& t : sig->inputs) {
    if (t.dims.empty() || t.dims[0].symbol != symbol) return;
    for (size_t d = 1; d < t.dims.size(); ++d) {
      if (t.dims[d].symbol == symbol) return;
    }
  }
  for (size_t o = 0; o < sig->outputs.size(); ++o) {
    const TensorSpec& t = sig->outputs[o];
    if (t.dims.empty() || t.dims[0].symbol != symbol) return;
    // Output dims that are expressions are known only from the manifest: without it, assume the worst.
    const JsonValue* shape = nullptr;
    if (manifest_outputs && o < manifest_outputs->size()) shape = manifest_outputs->at(o).Find("shape");
    for (size_t d = 1; d < t.dims.size(); ++d) {
      if (t.dims[d].symbol == symbol) return;
      if (t.dims[d].size < 0 && t.dims[d].symbol.empty()) {
        if (!shape || !shape->is_array() || d >= shape->size() || Mentions(shape->at(d), symbol)) return;
      }
    }
  }
  sig->has_batch = true;
  sig->batch.name = symbol;
  sig->batch.min = first.dims[0].min;
  sig->batch.max = first.dims[0].max;
}

}  // namespace

bool ReadSignature(const aotpack_model_t* model, Signature* out, std::string* error) {
  *out = Signature();
  if (!ReadTensors(model, false, &out->inputs, error) || !ReadTensors(model, true, &out->outputs, error)) {
    return false;
  }
  JsonValue manifest;
  std::string ignored;
  const JsonValue* outputs = nullptr;
  if (JsonValue::Parse(aotpack_model_manifest(model), &manifest, &ignored)) {
    const JsonValue* signature = manifest.Find("signature");
    outputs = signature ? signature->Find("outputs") : nullptr;
    if (outputs && !outputs->is_array()) outputs = nullptr;
  }
  FindBatchSymbol(outputs, out);
  return true;
}

}  // namespace aotpack_triton
