#include "model/cuda/op_profiler.h"

#include <algorithm>
#include <cstdio>

namespace pagoda {

OpProfiler::~OpProfiler() {
  double total = 0;
  for (const auto& [op, ms] : ms_) total += ms;
  if (steps_ > 0) {
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [op, ms] : ms_) rows.emplace_back(ms, op);
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "cuda profile: %d steps, %.3f ms GPU time per step\n", steps_,
                 total / steps_);
    for (const auto& [ms, op] : rows)
      std::fprintf(stderr, "  %-14s %9.3f ms/step %5.1f%%\n", op.c_str(), ms / steps_,
                   100 * ms / total);
  }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e;
    cudaEventCreate(&e);
    events_.push_back(e);
  }
  return events_[i];
}

void OpProfiler::begin() {
  ops_.clear();
  cudaEventRecord(event(0), stream_);
}

void OpProfiler::mark(const char* op) {
  ops_.push_back(op);
  cudaEventRecord(event(ops_.size()), stream_);
}

void OpProfiler::end() {
  if (ops_.empty()) return;
  cudaEventSynchronize(event(ops_.size()));
  for (size_t i = 0; i < ops_.size(); ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, events_[i], events_[i + 1]);
    ms_[ops_[i]] += ms;
  }
  ++steps_;
}

}  // namespace pagoda
