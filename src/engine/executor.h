// What the engine needs from a model on some device: run one batched step over the paged
// KV cache and copy KV blocks. The CPU model implements it here; the CUDA backend and the
// scheduler tests' fake model implement it too.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/sampling_row.h"
#include "core/status.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace pagoda {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual int32_t n_vocab() const = 0;
  // Runs the batch (rows, positions and block tables as Model::forward takes them) and
  // writes logits for batch.logit_rows (logit_rows.size() x n_vocab floats).
  virtual Status execute(const Batch& batch, float* logits) = 0;
  // Copies whole KV blocks before a step writes into them (copy-on-write).
  virtual void copy_blocks(const std::vector<kv::BlockCopy>& copies) = 0;
  // Whether execute_greedy is worth calling: the device picks the most likely token of
  // each logit row itself (first on ties, as argmax does), and only the ids come back.
  virtual bool has_greedy() const { return false; }
  virtual Status execute_greedy(const Batch& batch, int32_t* tokens) {
    return unsupported("this executor has no greedy path");
  }
  // Whether execute_sample is worth calling: the device draws each logit row's token as
  // sampling.rows[i] says (penalties, temperature, top-k / top-p / min-p, the given
  // uniform), and only the ids come back.
  virtual bool has_sampling() const { return false; }
  virtual Status execute_sample(const Batch& batch, const StepSampling& sampling, int32_t* tokens) {
    return unsupported("this executor has no device sampling");
  }

  // Pipelined steps (EngineCoreConfig::async_scheduling): launch() queues a step whose
  // tokens the device picks (execute_greedy's when `sampling` is null, else
  // execute_sample's) and may return before it runs; collect() waits for the oldest
  // launched step not yet collected and gives its tokens. A batch token t < 0 stands for
  // the token that the step launched just before this one picked for its logit row
  // -t - 1, so a step can be queued before the host has seen its input. At most two
  // steps are outstanding. A launch() that fails queued nothing; a step that fails later
  // fails its collect(). The default runs each step inside launch() (the same tokens, no
  // overlap; its failures wait for collect), so every executor can be driven this way; a
  // device that queues work overrides both.
  virtual Status launch(const Batch& batch, const StepSampling* sampling);
  virtual Status collect(std::vector<int32_t>* tokens);

 private:
  std::deque<Result<std::vector<int32_t>>> launched_;  // the default pipeline's results
  std::vector<int32_t> last_tokens_;                   // of the step launched last
  Batch resolved_;
};

// The CPU model over a KV pool of n_blocks blocks.
class CpuExecutor : public Executor {
 public:
  // q8_kv: the 8-bit KV pool (KvStorage).
  CpuExecutor(const Model& model, ThreadPool& pool, int n_blocks, int block_size,
              bool q8_kv = false);
  int32_t n_vocab() const override { return model_.config().n_vocab; }
  Status execute(const Batch& batch, float* logits) override;
  // The argmax of the logits, as the host sampler takes it (first on ties): lets greedy
  // requests take the pipelined path on the CPU too.
  bool has_greedy() const override { return true; }
  Status execute_greedy(const Batch& batch, int32_t* tokens) override;
  void copy_blocks(const std::vector<kv::BlockCopy>& copies) override;
  size_t kv_bytes() const { return kv_.bytes(); }

 private:
  const Model& model_;
  ThreadPool& pool_;
  KvStorage kv_;
  Model::WorkspacePtr ws_;
  std::vector<float> logits_;
};

}  // namespace pagoda
