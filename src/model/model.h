// A loaded decoder-only transformer: configuration, weights in ordinary memory, and the
// forward pass over a batch of tokens from one or more sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "core/batch.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/gguf.h"
#include "model/kv_storage.h"
#include "model/model_config.h"
#include "model/tensor_source.h"

namespace pagoda {

// What every backend refuses before running a batch: no tokens, token ids outside the
// vocabulary, logit rows outside the batch. A pipelined step (ModelRunner::launch) may
// hold placeholders t < 0 for rows -t - 1 < prev_picks of the previous step's picks.
Status check_batch(const Batch& batch, int32_t n_vocab, int prev_picks = 0);

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  // q, k and v as one matrix when their types agree (one pass over the activations),
  // otherwise three.
  std::vector<cpu::WeightMatrix> qkv;
  std::vector<float> qkv_bias;        // q_dim + 2*kv_dim, empty without biases
  std::vector<float> q_norm, k_norm;  // head_dim each, empty without per-head q/k norms
  cpu::WeightMatrix wo;
  std::vector<cpu::WeightMatrix> gate_up;  // fused [gate; up] or {gate, up}
  cpu::WeightMatrix down;
};

// Sees the input of each layer's matrix products during a forward pass (the CPU
// backend's), for importance matrices (`pagoda imatrix`): x holds n rows of `cols`
// values. q, k and v share one input, as do gate and up.
class ActivationObserver {
 public:
  enum class Input { kQkv, kWo, kGateUp, kDown };
  virtual ~ActivationObserver() = default;
  virtual void observe(int layer, Input which, const float* x, int64_t n, int64_t cols) = 0;
  // Each layer's keys (after RoPE) and values as the KV cache receives them: n rows of
  // kv_dim values each, rows `stride` floats apart (FP8 KV-cache calibration).
  virtual void observe_kv(int /*layer*/, const float* /*k*/, const float* /*v*/, int64_t /*n*/,
                          int64_t /*stride*/, int64_t /*kv_dim*/) {}
};

// The recipe features (model/arch/recipe.h) the CPU forward pass runs.
inline constexpr uint32_t kCpuRecipeFeatures = kFeatQkvBias | kFeatQkNorm | kFeatNeoxRope;
// The features the CUDA forward pass runs (CudaModel::kRecipeFeatures), here so that the
// ledger can say what the CUDA backend refuses without linking the plugin.
inline constexpr uint32_t kCudaRecipeFeatures = kFeatQkvBias | kFeatNeoxRope;

class Model {
 public:
  // Reads config and weights from a GGUF file or checkpoint folder (model/tensor_source.h),
  // copied into ordinary memory tensor by tensor, each tensor's mapped pages given back
  // once copied. Tensors the kernels cannot take are converted on `pool` (null: a pool of
  // every hardware thread, made only when something needs converting).
  static Result<std::unique_ptr<Model>> load(const TensorSource& source,
                                             ThreadPool* pool = nullptr);
  // The same over an opened GGUF file.
  static Result<std::unique_ptr<Model>> load(const GgufFile& file, ThreadPool* pool = nullptr);

  const ModelConfig& config() const { return config_; }
  // Bytes of all weights held (the bytes one decode step reads, but for the embedding).
  size_t weight_bytes() const;
  // Bytes a single-token decode step reads from weights: every matrix plus one embedding row.
  size_t decode_weight_bytes() const;
  // Tensors converted at load because the kernels lack their file type
  // (model/weight_types.h), e.g. "Q3_K->Q6_K x 97 (+190.3 MiB, 0.31 s)"; empty if none.
  const std::string& conversions() const { return conversions_; }

  // Scratch memory for forward(); grows to the largest batch seen.
  struct Workspace;
  struct WorkspaceDeleter {
    void operator()(Workspace* w) const;
  };
  using WorkspacePtr = std::unique_ptr<Workspace, WorkspaceDeleter>;
  WorkspacePtr make_workspace() const;

  // Runs the batch, writing K/V into `kv`, and logits for batch.logit_rows into `logits`
  // (logit_rows.size() x n_vocab floats; null: none wanted, the LM head is skipped).
  // observer (may be null) sees each layer product's input.
  Status forward(const Batch& batch, KvStorage& kv, float* logits, Workspace& ws, ThreadPool& pool,
                 ActivationObserver* observer = nullptr) const;

  ~Model();

 private:
  Model() = default;
  void compute_rope_tables(const Batch& batch, Workspace& ws) const;

  ModelConfig config_;
  cpu::WeightMatrix tok_embd_;
  cpu::WeightMatrix output_;  // empty when tied to tok_embd_
  std::vector<float> output_norm_;
  std::vector<float> rope_freq_factors_;  // llama3 scaling, empty when absent
  std::vector<LayerWeights> layers_;
  std::string conversions_;
};

}  // namespace pagoda
