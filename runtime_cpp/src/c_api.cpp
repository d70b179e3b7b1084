// The C API (aotpack.h): argument checks, option structs, and the boundary no C++ exception crosses.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "aotpack.h"
#include "c_enum.hpp"
#include "dtype.hpp"
#include "model.hpp"
#include "session.hpp"
#include "status.hpp"

using namespace aotpack;

namespace {

// Runs `body` (returning a Status) and turns it, or any exception escaping it, into a C status.
template <typename F>
aotpack_status_t guarded(F&& body) noexcept {
  try {
    return to_c_status(body());
  } catch (const std::bad_alloc&) {
    return to_c_status(resource_exhausted("out of memory"));
  } catch (const std::exception& e) {
    return to_c_status(internal_error("unexpected C++ exception: ", e.what(), "; please report it"));
  } catch (...) {
    return to_c_status(internal_error("unexpected C++ exception; please report it"));
  }
}

// Copies the caller's options over the defaults, reading no more than the caller's struct_size, so that a
// caller built against an older, shorter struct keeps working.
template <typename T>
Status read_options(const T* given, void (*init)(T*), const char* init_name, T* out) {
  init(out);
  if (!given) return Status();
  if (given->struct_size < sizeof(uint32_t))
    return invalid_argument("options.struct_size is ", given->struct_size, "; initialize the options with ", init_name);
  std::memcpy(out, given, std::min<size_t>(given->struct_size, sizeof(T)));
  out->struct_size = sizeof(T);
  return Status();
}

Status tensor_info(const std::vector<aotpack_tensor_info_t>& infos, size_t index, const char* what,
                   aotpack_tensor_info_t* out) {
  if (!out) return invalid_argument("out is NULL");
  if (index >= infos.size())
    return invalid_argument(what, " index ", index, " is out of range: the model has ", infos.size(), " ", what, "s");
  *out = infos[index];
  return Status();
}

// The signature a load requires, from the options: none without a public key.
Status required_signature(const char* path, const aotpack_model_options_t& opts, RequiredSignature* out,
                          bool* required) {
  *required = false;
  if (opts.public_key_path && opts.public_key_pem)
    return invalid_argument("options.public_key_path and options.public_key_pem are both set; give the key one way");
  if (!opts.public_key_path && !opts.public_key_pem) {
    if (opts.signature_path)
      return invalid_argument("options.signature_path is set but no public key is: a signature is checked only "
                              "against a trusted key (set public_key_path or public_key_pem)");
    return Status();
  }
  if (opts.public_key_path) {
    out->key.where = str_cat("public key ", opts.public_key_path);
    AOTPACK_RETURN_IF_ERROR(read_small_file(opts.public_key_path, kMaxKeyBytes, "public key file", &out->key.pem));
  } else {
    size_t n = strnlen(opts.public_key_pem, kMaxKeyBytes + 1);
    if (n > kMaxKeyBytes)
      return invalid_argument("options.public_key_pem is longer than ", kMaxKeyBytes, " bytes (not NUL-terminated?)");
    out->key.where = "the public key given in options.public_key_pem";
    out->key.pem.assign(opts.public_key_pem, n);
  }
  out->path = opts.signature_path ? std::string(opts.signature_path) : std::string(path) + ".sig";
  *required = true;
  return Status();
}

}  // namespace

extern "C" {

const char* aotpack_version(void) { return AOTPACK_VERSION_STRING; }

aotpack_status_code_t aotpack_status_code(aotpack_status_t status) { return status ? status->code : AOTPACK_OK; }

const char* aotpack_status_message(aotpack_status_t status) { return status ? status->message.c_str() : ""; }

void aotpack_status_free(aotpack_status_t status) {
  if (status && status != &g_out_of_memory_status) delete status;
}

const char* aotpack_dtype_name(aotpack_dtype_t dtype) {
  aotpack_dtype_t known;
  return dtype_from_code(c_enum_value(dtype), &known) ? dtype_name(known) : "unknown";
}

size_t aotpack_dtype_size(aotpack_dtype_t dtype) {
  aotpack_dtype_t known;
  return dtype_from_code(c_enum_value(dtype), &known) ? dtype_size(known) : 0;
}

void aotpack_model_options_init(aotpack_model_options_t* options) {
  if (!options) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->verify_digests = 1;
  options->prepare_device_type = AOTPACK_PREPARE_NONE;
  options->prepare_device_index = 0;
}

aotpack_status_t aotpack_model_load(const char* path, const aotpack_model_options_t* options, aotpack_model_t** out) {
  return guarded([&]() -> Status {
    if (!out) return invalid_argument("out is NULL");
    *out = nullptr;
    if (!path) return invalid_argument("path is NULL");
    aotpack_model_options_t opts;
    AOTPACK_RETURN_IF_ERROR(read_options(options, &aotpack_model_options_init, "aotpack_model_options_init", &opts));
    RequiredSignature signature;
    bool signed_load = false;
    AOTPACK_RETURN_IF_ERROR(required_signature(path, opts, &signature, &signed_load));
    std::unique_ptr<aotpack_model> model;
    if (opts.prepare_device_index < 0)
      return invalid_argument("prepare_device_index is ", opts.prepare_device_index, ", expected 0 or more");
    aotpack_model::LoadOptions load_options;
    load_options.verify_digests = opts.verify_digests != 0;
    load_options.prepare_device_type = opts.prepare_device_type;
    load_options.prepare_device_index = opts.prepare_device_index;
    load_options.signature = signed_load ? &signature : nullptr;
    AOTPACK_RETURN_IF_ERROR(aotpack_model::load(path, load_options, &model));
    *out = model.release();
    return Status();
  });
}

void aotpack_model_release(aotpack_model_t* model) {
  if (model) model->release();
}

size_t aotpack_model_num_inputs(const aotpack_model_t* model) { return model ? model->input_infos().size() : 0; }

size_t aotpack_model_num_outputs(const aotpack_model_t* model) { return model ? model->output_infos().size() : 0; }

aotpack_status_t aotpack_model_input_info(const aotpack_model_t* model, size_t index, aotpack_tensor_info_t* out) {
  return guarded([&]() -> Status {
    if (!model) return invalid_argument("model is NULL");
    return tensor_info(model->input_infos(), index, "input", out);
  });
}

aotpack_status_t aotpack_model_output_info(const aotpack_model_t* model, size_t index, aotpack_tensor_info_t* out) {
  return guarded([&]() -> Status {
    if (!model) return invalid_argument("model is NULL");
    return tensor_info(model->output_infos(), index, "output", out);
  });
}

const char* aotpack_model_manifest(const aotpack_model_t* model) {
  return model ? model->manifest_text().c_str() : "";
}

const char* aotpack_model_digest(const aotpack_model_t* model) { return model ? model->digest().c_str() : ""; }

const char* aotpack_model_weights_digest(const aotpack_model_t* model) {
  return model ? model->weights_digest().c_str() : "";
}

aotpack_status_t aotpack_model_refit(const aotpack_model_t* model, const void* safetensors_bytes, size_t size,
                                     aotpack_model_t** out) {
  return guarded([&]() -> Status {
    if (!out) return invalid_argument("out is NULL");
    *out = nullptr;
    if (!model) return invalid_argument("model is NULL");
    if (!safetensors_bytes && size > 0) return invalid_argument("safetensors_bytes is NULL");
    std::unique_ptr<aotpack_model> refitted;
    AOTPACK_RETURN_IF_ERROR(aotpack_model::refit(*model, static_cast<const uint8_t*>(safetensors_bytes), size, &refitted));
    *out = refitted.release();
    return Status();
  });
}

void aotpack_session_options_init(aotpack_session_options_t* options) {
  if (!options) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->device_type = AOTPACK_DEVICE_CPU;
  options->device_index = 0;
  options->num_threads = 1;
  options->io_memory = AOTPACK_MEMORY_HOST;
  options->cuda_graphs = 1;
  options->cuda_graph_cache_size = 64;
  options->cuda_pdl = 1;
}

aotpack_status_t aotpack_session_create(const aotpack_model_t* model, const aotpack_session_options_t* options,
                                        aotpack_session_t** out) {
  return guarded([&]() -> Status {
    if (!out) return invalid_argument("out is NULL");
    *out = nullptr;
    if (!model) return invalid_argument("model is NULL");
    aotpack_session_options_t opts;
    AOTPACK_RETURN_IF_ERROR(
        read_options(options, &aotpack_session_options_init, "aotpack_session_options_init", &opts));
    std::unique_ptr<aotpack_session> session;
    AOTPACK_RETURN_IF_ERROR(aotpack_session::create(model, opts, &session));
    *out = session.release();
    return Status();
  });
}

void aotpack_session_destroy(aotpack_session_t* session) { delete session; }

aotpack_memory_t aotpack_session_io_memory(const aotpack_session_t* session) {
  return session ? session->io_memory() : AOTPACK_MEMORY_HOST;
}

aotpack_status_t aotpack_session_run(aotpack_session_t* session, const aotpack_tensor_t* inputs, size_t num_inputs) {
  return guarded([&]() -> Status {
    if (!session) return invalid_argument("session is NULL");
    return session->run(inputs, num_inputs);
  });
}

aotpack_status_t aotpack_session_run_after(aotpack_session_t* session, const aotpack_tensor_t* inputs,
                                           size_t num_inputs, void* cuda_stream) {
  return guarded([&]() -> Status {
    if (!session) return invalid_argument("session is NULL");
    return session->run_after(inputs, num_inputs, cuda_stream);
  });
}

aotpack_status_t aotpack_session_enqueue(aotpack_session_t* session, const aotpack_tensor_t* inputs, size_t num_inputs,
                                         void* cuda_stream) {
  return guarded([&]() -> Status {
    if (!session) return invalid_argument("session is NULL");
    return session->enqueue(inputs, num_inputs, cuda_stream);
  });
}

aotpack_status_t aotpack_session_synchronize(aotpack_session_t* session) {
  return guarded([&]() -> Status {
    if (!session) return invalid_argument("session is NULL");
    return session->synchronize();
  });
}

aotpack_status_t aotpack_session_output(const aotpack_session_t* session, size_t index, aotpack_tensor_t* out) {
  return guarded([&]() -> Status {
    if (!session) return invalid_argument("session is NULL");
    if (!out) return invalid_argument("out is NULL");
    return session->output(index, out);
  });
}

}  // extern "C"
