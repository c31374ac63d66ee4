// One sequence evaluated on its own over any backend (a ModelRunner): the same job as
// Session (session.h) does for the CPU Model, for `pagoda bench --device` and the
// backend comparison in `pagoda cuda-check`. Block i of the runner's pool holds
// positions [i * block_size, (i + 1) * block_size), in order.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/runner.h"

namespace pagoda {

class RunnerSession {
 public:
  // The runner's pool must hold n_ctx tokens; prompts run in chunks of n_batch tokens.
  RunnerSession(ModelRunner& runner, int n_ctx, int block_size, int n_batch = 512);

  // Appends `tokens`; fills `logits` after the last token (n_vocab floats), or after every
  // token when all_logits (n x n_vocab). logits may be null.
  Status eval(const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>* logits);
  int n_past() const { return n_past_; }
  void reset() { n_past_ = 0; }

 private:
  ModelRunner& runner_;
  int n_ctx_;
  int n_batch_;
  int n_past_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace pagoda
