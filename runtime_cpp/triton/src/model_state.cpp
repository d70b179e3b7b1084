#include "model_state.hpp"

#include <cstdlib>
#include <memory>

#include "json_value.hpp"
#include "model_config.hpp"
#include "triton_status.hpp"

namespace aotpack_triton {
namespace {

TRITONSERVER_Error* ReadConfig(TRITONBACKEND_Model* model, JsonValue* out) {
  TRITONSERVER_Message* message = nullptr;
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &message));
  const char* base = nullptr;
  size_t size = 0;
  TRITONSERVER_Error* error = TRITONSERVER_MessageSerializeToJson(message, &base, &size);
  std::string text = error ? std::string() : std::string(base, size);
  TRITONSERVER_Error* deleted = TRITONSERVER_MessageDelete(message);
  if (deleted) TRITONSERVER_ErrorDelete(deleted);
  if (error) return error;
  std::string parse_error;
  if (!JsonValue::Parse(text, out, &parse_error)) {
    return Error(TRITONSERVER_ERROR_INTERNAL, "the model configuration Triton gave is not JSON: " + parse_error);
  }
  return nullptr;
}

TRITONSERVER_Error* SetConfig(TRITONBACKEND_Model* model, const JsonValue& config) {
  const std::string text = config.Serialize();
  TRITONSERVER_Message* message = nullptr;
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONSERVER_MessageNewFromSerializedJson(&message, text.data(), text.size()));
  TRITONSERVER_Error* error = TRITONBACKEND_ModelSetConfig(model, 1, message);
  TRITONSERVER_Error* deleted = TRITONSERVER_MessageDelete(message);
  if (deleted) TRITONSERVER_ErrorDelete(deleted);
  return error;
}

// A parameter that must be an integer in [lo, hi].
TRITONSERVER_Error* IntParameter(const JsonValue& config, const std::string& key, int64_t lo, int64_t hi,
                                 int32_t* value) {
  const std::string text = ConfigParameter(config, key, std::to_string(*value));
  JsonValue parsed = JsonValue::String(text);
  int64_t v = 0;
  if (!parsed.AsInt(&v) || v < lo || v > hi) {
    return Error(TRITONSERVER_ERROR_INVALID_ARG, "parameter " + key + " is '" + text + "': expected an integer in " +
                                                     std::to_string(lo) + ".." + std::to_string(hi));
  }
  *value = static_cast<int32_t>(v);
  return nullptr;
}

}  // namespace

TRITONSERVER_Error* ModelState::Create(TRITONBACKEND_Model* triton_model, ModelState** out) {
  std::unique_ptr<ModelState> state(new ModelState());
  const char* name = nullptr;
  uint64_t version = 0;
  TRITONBACKEND_ArtifactType artifact_type;
  const char* location = nullptr;
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelName(triton_model, &name));
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(triton_model, &version));
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelRepository(triton_model, &artifact_type, &location));
  state->name_ = name;
  if (artifact_type != TRITONBACKEND_ARTIFACT_FILESYSTEM) {
    return Error(TRITONSERVER_ERROR_UNSUPPORTED, "model " + state->name_ + ": the aotpack backend reads packages "
                                                 "from a file system repository only");
  }
  JsonValue config;
  AOTPACK_TRITON_RETURN_IF_ERROR(ReadConfig(triton_model, &config));

  int32_t verify_digests = 1;
  AOTPACK_TRITON_RETURN_IF_ERROR(IntParameter(config, "aotpack.verify_digests", 0, 1, &verify_digests));
  AOTPACK_TRITON_RETURN_IF_ERROR(IntParameter(config, "aotpack.num_threads", 1, 1024, &state->num_threads_));
  AOTPACK_TRITON_RETURN_IF_ERROR(IntParameter(config, "aotpack.cuda_graphs", 0, 1, &state->cuda_graphs_));
  AOTPACK_TRITON_RETURN_IF_ERROR(IntParameter(config, "aotpack.cuda_pdl", 0, 1, &state->cuda_pdl_));
  const JsonValue* file = config.Find("default_model_filename");
  const std::string filename = file && file->is_string() && !file->text().empty() ? file->text() : "model.aotpack";
  const std::string path = std::string(location) + "/" + std::to_string(version) + "/" + filename;

  aotpack_model_options_t options;
  aotpack_model_options_init(&options);
  options.verify_digests = verify_digests;
  AOTPACK_TRITON_RETURN_IF_ERROR(
      FromStatus(aotpack_model_load(path.c_str(), &options, &state->model_), "model " + state->name_ + ": "));
  std::string error;
  if (!ReadSignature(state->model_, &state->signature_, &error)) {
    return Error(TRITONSERVER_ERROR_UNSUPPORTED, "model " + state->name_ + ": " + path + ": " + error);
  }

  bool auto_complete = false;
  AOTPACK_TRITON_RETURN_IF_ERROR(TRITONBACKEND_ModelAutoCompleteConfig(triton_model, &auto_complete));
  if (auto_complete && CompleteConfig(state->signature_, &config)) {
    AOTPACK_TRITON_RETURN_IF_ERROR(SetConfig(triton_model, config));
    AOTPACK_TRITON_RETURN_IF_ERROR(ReadConfig(triton_model, &config));  // the server may have added fields
    Log(TRITONSERVER_LOG_INFO, "model " + state->name_ + ": filled in the configuration from the package signature");
  }
  if (!CheckConfig(state->signature_, config, &state->max_batch_size_, &error)) {
    return Error(TRITONSERVER_ERROR_INVALID_ARG,
                 "model " + state->name_ + ": the configuration does not match " + path + ": " + error);
  }
  *out = state.release();
  return nullptr;
}

ModelState::~ModelState() { aotpack_model_release(model_); }

}  // namespace aotpack_triton
