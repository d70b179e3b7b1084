// A session: one model run on one device. It checks each run's inputs against the signature, binds the
// symbols and checks the buffer sizes; its backend's workspace, made at creation with everything a run
// needs, does the rest, so a run allocates nothing (except to describe a failure).
#ifndef AOTPACK_SRC_SESSION_HPP_
#define AOTPACK_SRC_SESSION_HPP_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aotpack.h"
#include "backend.hpp"
#include "model.hpp"
#include "status.hpp"

// The C API's opaque session. One thread at a time.
struct aotpack_session {
 public:
  aotpack_session(const aotpack_session&) = delete;
  aotpack_session& operator=(const aotpack_session&) = delete;

  ~aotpack_session();

  // The session holds a reference to `model` (aotpack_model::retain) until it is destroyed.
  static aotpack::Status create(const aotpack_model* model, const aotpack_session_options_t& options,
                                std::unique_ptr<aotpack_session>* out);

  aotpack::Status run(const aotpack_tensor_t* inputs, size_t num_inputs);
  aotpack::Status output(size_t index, aotpack_tensor_t* out) const;
  aotpack_memory_t io_memory() const { return workspace_->io_memory(); }

 private:
  explicit aotpack_session(const aotpack_model* model) : model_(model) { model_->retain(); }

  aotpack::Status check_inputs(const aotpack_tensor_t* inputs, size_t num_inputs);
  aotpack::Status plan_buffers();
  std::string symbol_values() const;  // "batch=3, seq=8", for messages

  const aotpack_model* model_;
  std::unique_ptr<aotpack::Workspace> workspace_;
  std::vector<const void*> input_data_;  // per program input, set by each run
  std::vector<std::array<int64_t, AOTPACK_MAX_RANK>> output_shapes_;
  std::vector<int64_t> symbols_;         // this run's symbol values, program order
  std::vector<char> bound_;              // whether symbols_[i] is bound yet in check_inputs
  bool have_outputs_ = false;
};

#endif  // AOTPACK_SRC_SESSION_HPP_
