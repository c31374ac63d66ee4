// One sequence evaluated on its own: the KV blocks of a single context, filled in order.
// It is the plain path `pagoda run`, `logits` and `bench` use; the batching engine
// schedules many sequences over one shared pool instead. It is RunnerSession over the
// CPU runner of `model` (one code path for every backend).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/runner_session.h"
#include "model/model.h"
#include "model/runner.h"

namespace pagoda {

class Session {
 public:
  // Room for n_ctx tokens; prompts are run in chunks of at most n_batch tokens. kv: the
  // cache's element type (16-bit or the CPU's 8-bit kQ8_0; KvStorage::supports_q8 says
  // which models take the latter).
  Session(const Model& model, ThreadPool& pool, int n_ctx, int n_batch = 512,
          KvCacheType kv = KvCacheType::k16Bit);

  // Appends `tokens` to the sequence. Fills `logits` with the logits after the last
  // token (n_vocab floats), or after every token when all_logits (n x n_vocab).
  Status eval(const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>* logits) {
    return seq_.eval(tokens, all_logits, logits);
  }
  int n_past() const { return seq_.n_past(); }
  int n_ctx() const { return n_ctx_; }
  void reset() { seq_.reset(); }

 private:
  int n_ctx_;
  std::unique_ptr<ModelRunner> runner_;  // before seq_, which refers to it
  RunnerSession seq_;
};

}  // namespace pagoda
