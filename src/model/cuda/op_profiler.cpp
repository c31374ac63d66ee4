#include "model/cuda/op_profiler.h"

#include <algorithm>
#include <cstdio>

namespace pagoda {

OpProfiler::~OpProfiler() {
  for (const auto& [kind, t] : kinds_) {
    double total = 0;
    for (const auto& [op, ms] : t.ms) total += ms;
    if (t.steps == 0) continue;
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [op, ms] : t.ms) rows.emplace_back(ms, op);
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "cuda profile, %s: %d steps, %.3f ms GPU time per step\n", kind.c_str(),
                 t.steps, total / t.steps);
    for (const auto& [ms, op] : rows)
      std::fprintf(stderr, "  %-14s %9.3f ms/step %5.1f%%\n", op.c_str(), ms / t.steps,
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

void OpProfiler::begin(const char* kind) {
  kind_ = kind;
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
  Totals& t = kinds_[kind_];
  for (size_t i = 0; i < ops_.size(); ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, events_[i], events_[i + 1]);
    t.ms[ops_[i]] += ms;
  }
  ++t.steps;
}

}  // namespace pagoda
