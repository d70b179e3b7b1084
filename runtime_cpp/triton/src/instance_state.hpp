// One Triton model instance: an aotpack session on the instance's device (CPU, or CUDA in the device's primary
// context) and the staging memory for merged requests. Triton calls Execute on one thread at a time per
// instance, which is the session's rule too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aotpack.h"
#include "model_state.hpp"
#include "triton_api.h"

namespace aotpack_triton {

class InstanceState {
 public:
  static TRITONSERVER_Error* Create(TRITONBACKEND_ModelInstance* instance, const ModelState* model,
                                    InstanceState** out);
  ~InstanceState();
  InstanceState(const InstanceState&) = delete;
  InstanceState& operator=(const InstanceState&) = delete;

  // Answers and releases every request: requests with matching shapes are concatenated on the batch dim and
  // run once; a request the runtime refuses gets an error response with the runtime's message, and the others
  // are answered as if it had not been there.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count);

 private:
  struct Pending;
  InstanceState() = default;

  void Run(std::vector<Pending>* pending);                      // prepare, group, run
  void Respond(std::vector<Pending>* pending, uint64_t exec_start);  // send, report, release
  void Prepare(Pending* p);
  void RunGroup(const std::vector<Pending*>& group);
  TRITONSERVER_Error* RunOnce(const std::vector<Pending*>& group);
  TRITONSERVER_Error* WriteOutputs(Pending* p, int64_t row_offset);

  TRITONBACKEND_ModelInstance* instance_ = nullptr;
  const ModelState* model_ = nullptr;
  std::string name_;
  aotpack_session_t* session_ = nullptr;
  std::vector<std::vector<char>> staging_;  // per input: the merged requests' rows, reused across executions
};

}  // namespace aotpack_triton
