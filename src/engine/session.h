// One sequence evaluated on its own: the KV blocks of a single context, filled in order.
// It is the plain path `pagoda run`, `logits` and `bench` use; the batching engine
// schedules many sequences over one shared pool instead.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/kv_storage.h"
#include "model/model.h"

namespace pagoda {

class Session {
 public:
  // Room for n_ctx tokens; prompts are run in chunks of at most n_batch tokens.
  Session(const Model& model, ThreadPool& pool, int n_ctx, int n_batch = 512);

  // Appends `tokens` to the sequence. Fills `logits` with the logits after the last
  // token (n_vocab floats), or after every token when all_logits (n x n_vocab).
  Status eval(const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>* logits);
  int n_past() const { return n_past_; }
  int n_ctx() const { return n_ctx_; }
  void reset() { n_past_ = 0; }

 private:
  const Model& model_;
  ThreadPool& pool_;
  int n_ctx_;
  int n_batch_;
  int n_past_ = 0;
  KvStorage kv_;
  std::vector<int32_t> blocks_;
  Model::WorkspacePtr ws_;
};

}  // namespace pagoda
