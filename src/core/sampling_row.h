// One logit row's sampling as a device does it: SamplingParams' filters, the request
// generator's uniform draw, and where the row's penalty entries sit in a shared list.
// Plain data, so the engine fills it and a backend's kernels read it as is.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

struct SamplingRow {
  float temperature = 0.0f;  // <= 0 (or top_k == 1): the maximum
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f, min_p = 0.0f;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  // Entries [pen_begin, pen_begin + pen_count) of the penalty list: (token, output count,
  // seen) triples, one per distinct token (seen: in the prompt or output, for the
  // repetition penalty; the count drives the presence and frequency penalties).
  int32_t pen_begin = 0, pen_count = 0;
  double u = 0.0;  // uniform in [0, 1)
};

// The rows of one step, in logit-row order, and their penalty list (3 ints per entry).
struct StepSampling {
  std::vector<SamplingRow> rows;
  std::vector<int32_t> penalties;
};

}  // namespace pagoda
