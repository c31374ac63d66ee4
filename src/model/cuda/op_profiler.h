// Where a forward pass spends its GPU time, by kind of op: events recorded between ops
// (PAGODA_CUDA_PROFILE=1; graphs are off then, so every kernel is launched on its own),
// accumulated over all steps of a kind (decode-only steps apart from steps with prefill
// rows, whose times differ by orders) and printed to stderr when the model is destroyed.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

namespace pagoda {

class OpProfiler {
 public:
  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {}
  ~OpProfiler();
  // `kind` names the step's kind (a string literal: it is kept).
  void begin(const char* kind);
  // The GPU time since the previous mark goes to `op`.
  void mark(const char* op);
  // Waits for the step and adds its times.
  void end();

 private:
  cudaEvent_t event(size_t i);
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> ops_;
  const char* kind_ = "";
  struct Totals {
    std::map<std::string, double> ms;
    int steps = 0;
  };
  std::map<std::string, Totals> kinds_;
};

}  // namespace pagoda
