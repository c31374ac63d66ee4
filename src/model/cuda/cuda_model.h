// The CUDA backend's model: weights in GPU memory in the layouts of backend/cuda, the
// paged KV pool (fp16 or FP8), and the forward pass of the llama-like architectures (the same
// layer as model/forward.cpp, op for op, on the GPU).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/kernels.h"
#include "model/cuda/fusion_plan.h"
#include "model/runner.h"

namespace pagoda {

class OpHooks;
class OpProfiler;

class CudaModel : public ModelRunner {
 public:
  // The recipe features (model/arch/recipe.h) the CUDA forward pass runs.
  static constexpr uint32_t kRecipeFeatures = kCudaRecipeFeatures;
  static Result<std::unique_ptr<CudaModel>> load(const TensorSource& file,
                                                 const RunnerOptions& options);
  ~CudaModel() override;

  const ModelConfig& config() const override { return config_; }
  DeviceKind device_kind() const override { return DeviceKind::kCuda; }
  std::string describe() const override;
  size_t decode_weight_bytes() const override;
  size_t weight_bytes() const override { return weight_bytes_; }
  Status forward(const Batch& batch, const StepOutput& out) override;
  // Both on the device: the argmax, and the draw of a StepSampling row.
  bool picks_tokens(bool) const override { return true; }
  Status copy_block(int src, int dst) override;
  Status launch(const Batch& batch, const StepSampling* sampling) override;
  Status collect(std::vector<int32_t>* tokens) override;

  cuda::DeviceContext& device() { return *dev_; }

 private:
  struct Layer {
    cuda::DeviceMatrix qkv, wo, gate_up, down;
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* qkv_bias = nullptr;  // null without biases
  };
  // One forward pass as the kernels see it: device index arrays and sizes.
  struct Step {
    cuda::DeviceBatch db;
    cuda::AttentionPlan plan;
    const int32_t* tokens = nullptr;
    const int32_t* logit_rows = nullptr;
    int n = 0, n_out = 0;
    bool greedy = false;  // argmax on the device instead of logits to the host
  };
  // Decode steps replay CUDA graphs captured per (rows, logit rows, greedy, KV splits).
  using GraphKey = std::tuple<int, int, bool, int>;
  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~Graph();
  };

  CudaModel() = default;
  Status load_weights(const TensorSource& f);
  Status allocate_kv();
  Status reserve(int n_tokens, int n_logit_rows);
  Status build_batch(const Batch& batch, Step* step);
  // Logits to `out` (greedy false, no sampling), or token ids: the argmax (greedy) or
  // drawn as `sampling` says.
  Status run(const Batch& batch, bool greedy, void* out, const StepSampling* sampling = nullptr);
  // The part of a step both run() and launch() queue: checks, the batch description, the
  // forward pass, and the tokens' draw when there is one (n_out logit rows). Batch tokens
  // below 0 are allowed when `prev_picks` > 0: rows of the previous step's picks.
  Status queue_step(const Batch& batch, bool greedy, const StepSampling* sampling, int n_out,
                    int prev_picks);
  // queue_step's second half, once the step's staging pair (stage_) is chosen.
  Status queue_staged(const Batch& batch, bool greedy, const StepSampling* sampling, int n_out);
  // Sends the step's sampling rows and penalties to the device and queues the draw.
  Status enqueue_sampling(const StepSampling& sampling, int n_out);
  // Queues every kernel of the step on the stream, as the step's fusion plan says: the
  // embedding, each layer's attention and FFN blocks, the output.
  Status enqueue(const Step& step);
  Status attention_block(const Step& step, int l, const LayerPlan& p, OpHooks& ops);
  Status ffn_block(const Step& step, int l, const LayerPlan& p, OpHooks& ops);
  Status output_block(const Step& step, OpHooks& ops);
  // y = W norm(x) (norm_w), as the product's input type and the step's size want it.
  Status norm_product(int n, const float* norm_w, const cuda::DeviceMatrix& w, float* y,
                      int64_t y_stride, unsigned kind, const char* name, OpHooks& ops);
  // x += W in: the one-token kernel with fusion f (gemv), or the plain product.
  Status residual_product(int n, const cuda::DeviceMatrix& w, const void* in, int64_t cols,
                          bool gemv, const cuda::GemvFusion& f, unsigned kind, const char* name,
                          OpHooks& ops);

  // Fusion planning and the fused kernels' parameters (fusion_plan.cpp).
  static StepClass step_class(int n_tokens);
  FusionPlan plan_fusions(StepClass k) const;
  cuda::RopeParams make_rope_params() const;
  // Layer l's qkv epilogue: RoPE, q to q16_, K and V into the cache.
  cuda::GemvFusion rope_kv_fusion(int l, const cuda::DeviceBatch& batch) const;
  // The sums of squares of layer l's folded norm `which` (0: attention, 1: FFN).
  unsigned long long* norm_sums(int l, int which) const;
  // f reading the folded norm's output: its sums scaled by the norm's scale.
  cuda::GemvFusion reading_norm(cuda::GemvFusion f, int l, int which) const;
  // The residual product before layer l's norm `which` storing that norm's input.
  cuda::GemvFusion storing_norm(int l, int which) const;
  // f normalising its f32 input in the product's prologue (norm weights norm_w).
  cuda::GemvFusion norm_prologue(cuda::GemvFusion f, const float* norm_w) const;
  Status launch_graph(const Step& step);
  void drop_graphs();
  cuda::KvLayerView kv_layer(int l) const;
  cuda::KvType kv_type() const {
    return options_.kv_cache_type == KvCacheType::kFp8 ? cuda::KvType::kFp8E4M3
                                                       : cuda::KvType::kF16;
  }

  RunnerOptions options_;
  // FP8 KV cache: each layer's K and V scale, from the checkpoint's calibrated scales or
  // else options_.kv_k_scale / kv_v_scale for every layer.
  std::vector<float> kv_k_scales_, kv_v_scales_;
  ModelConfig config_;
  std::unique_ptr<cuda::DeviceContext> dev_;
  std::vector<cuda::DeviceBuffer> weights_;  // owns every weight allocation
  cuda::DeviceMatrix tok_embd_, output_;     // output_ aliases tok_embd_ when tied
  const float* output_norm_ = nullptr;
  const float* rope_factors_ = nullptr;
  std::vector<Layer> layers_;
  size_t weight_bytes_ = 0;
  std::string conversions_;  // tensors converted at load (Loader::conversions), or empty

  cuda::DeviceBuffer kv_k_, kv_v_;  // [layer][block][kv_head][slot][head_dim] of kv_type()
  size_t kv_layer_elems_ = 0;

  // Scratch sized for capacity_ tokens / logit_capacity_ logit rows.
  int capacity_ = 0, logit_capacity_ = 0;
  cuda::DeviceBuffer x_, xn_, qkv_, q16_, attn_, gu_, hidden_, rope_cs_, logits_, tokens_out_,
      attn_ws_, meta_;
  // The folded norms' sums of squares (kFuseNormAttn, kFuseNormFfn): kNormSlots a norm, two norms a
  // layer, zeroed at the start of each step that uses them.
  cuda::DeviceBuffer norm_ss_;
  // Host staging of a step's batch description and sampling rows, two of each: a
  // pipelined step fills one while the step queued before may still be copying from the
  // other (stage_: the one the step being queued fills).
  cuda::PinnedBuffer meta_host_[2], logits_host_;
  int stage_ = 0;
  cuda::DeviceBuffer sampling_;  // SamplingRows, then the penalty list
  cuda::PinnedBuffer sampling_host_[2];
  // Pipelined steps (launch / collect): queued steps oldest first, each with its picked
  // tokens' host slot; done_[slot] is recorded once they are there.
  struct Queued {
    int n_out = 0, slot = 0;
  };
  std::deque<Queued> queued_;
  cuda::PinnedBuffer tokens_host_[2];
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int next_slot_ = 0;
  int last_picks_ = -1;  // rows the step queued last picked (placeholders' bound); -1: none

  std::map<GraphKey, std::unique_ptr<Graph>> graphs_;
  std::map<GraphKey, int> graph_seen_;  // eager runs per key before capture
  bool use_graphs_ = true;
  // The CUDA switches in force (CudaSwitches): fusions one-token steps may take, kinds of
  // op left out of every step (a timing experiment; the outputs are wrong).
  unsigned fuse_ = CudaSwitches::kFuseAll;
  unsigned omit_ = 0;
  // The fusion plan of each StepClass, made at load once the switches are known.
  FusionPlan plans_[3];
  cuda::RopeParams rope_;  // the model's RoPE, for its kernels
  // Keys a decode KV split aims at (cuda::decode_splits_for_context), so short contexts
  // run few splits and skip the merge; 0: splits depend on the batch size alone
  // (cuda::decode_splits). PAGODA_CUDA_SPLIT_KEYS sets it; 256 by default (an H100's
  // batch-1 tg128: BF16 +0.8%, Q4_0 +2.2% against 0, bench/RESULTS.md).
  int split_keys_ = 256;
  std::unique_ptr<OpProfiler> profiler_;  // PAGODA_CUDA_PROFILE=1: time per op kind
};

namespace cuda {
// Loads `file`'s weights to the GPU (the plugin's side of make_cuda_runner; the CUDA tests
// call it directly).
Result<std::unique_ptr<ModelRunner>> make_runner(const TensorSource& file,
                                                 const RunnerOptions& options);
}  // namespace cuda

}  // namespace pagoda
