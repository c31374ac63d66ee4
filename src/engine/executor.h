// What the engine needs from a model on some device: run one batched step over the paged
// KV cache and copy KV blocks. The CPU model implements it here; the CUDA backend and the
// scheduler tests' fake model implement it too.
#pragma once

#include <cstdint>
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
};

// The CPU model over a KV pool of n_blocks blocks.
class CpuExecutor : public Executor {
 public:
  CpuExecutor(const Model& model, ThreadPool& pool, int n_blocks, int block_size);
  int32_t n_vocab() const override { return model_.config().n_vocab; }
  Status execute(const Batch& batch, float* logits) override;
  void copy_blocks(const std::vector<kv::BlockCopy>& copies) override;
  size_t kv_bytes() const { return kv_.bytes(); }

 private:
  const Model& model_;
  ThreadPool& pool_;
  KvStorage kv_;
  Model::WorkspacePtr ws_;
};

}  // namespace pagoda
