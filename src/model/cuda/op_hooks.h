// What runs around each op of a CUDA step, kept out of the forward pass itself:
// PAGODA_CUDA_OMIT leaves kinds of op out (a timing experiment: what each kind costs
// inside the graph; the outputs are wrong), PAGODA_CUDA_PROFILE times each op
// (OpProfiler).
#pragma once

#include "core/status.h"
#include "model/cuda/op_profiler.h"

namespace pagoda {

class OpHooks {
 public:
  OpHooks(unsigned omit, OpProfiler* profiler) : omit_(omit), profiler_(profiler) {}
  // Queues the op unless its kind (CudaSwitches::kOmit*; 0: never left out) is omitted,
  // then marks the profile's boundary under `name` (a literal).
  template <typename Launch>
  Status run(unsigned kind, const char* name, Launch&& launch) {
    if ((omit_ & kind) == 0) PAGODA_RETURN_IF_ERROR(launch());
    if (profiler_) profiler_->mark(name);
    return Status::ok();
  }

 private:
  unsigned omit_;
  OpProfiler* profiler_;
};

}  // namespace pagoda
