// The CUDA backend's fusion decisions (fusion_plan.h) and the fused kernels' parameters.
#include "model/cuda/fusion_plan.h"

#include <cmath>

#include "model/cuda/cuda_model.h"

namespace pagoda {

StepClass CudaModel::step_class(int n) {
  return n == 1 ? StepClass::kOneToken
                : (n <= cuda::kGemvMaxTokens ? StepClass::kFewTokens : StepClass::kBatch);
}

cuda::RopeParams CudaModel::make_rope_params() const {
  const ModelConfig& c = config_;
  cuda::RopeParams rp;
  rp.n_heads = c.n_heads;
  rp.n_kv_heads = c.n_kv_heads;
  rp.head_dim = c.head_dim;
  rp.n_pairs = c.rope_dims / 2;
  rp.neox = c.recipe.rope_style == RopeStyle::kNeox;
  rp.theta_scale = std::pow(c.rope_theta, -2.0f / static_cast<float>(c.rope_dims));
  rp.freq_scale = c.rope_freq_scale;
  rp.freq_factors = c.rope_has_freq_factors ? rope_factors_ : nullptr;
  return rp;
}

cuda::GemvFusion CudaModel::rope_kv_fusion(int l, const cuda::DeviceBatch& batch) const {
  cuda::GemvFusion f;
  f.kind = cuda::GemvFusion::kRopeKv;
  f.bias = layers_[static_cast<size_t>(l)].qkv_bias;
  f.rope = rope_;
  f.cs = rope_cs_.as<float>();
  f.batch = batch;
  f.q_out = q16_.as<uint16_t>();
  f.kv = kv_layer(l);
  return f;
}

unsigned long long* CudaModel::norm_sums(int l, int which) const {
  return norm_ss_.as<unsigned long long>() +
         (2 * l + which) * cuda::kNormSlots * cuda::kNormSlotStride;
}

cuda::GemvFusion CudaModel::reading_norm(cuda::GemvFusion f, int l, int which) const {
  f.in_ss = norm_sums(l, which);
  f.in_dim = config_.dim;
  f.in_eps = config_.rms_eps;
  return f;
}

cuda::GemvFusion CudaModel::storing_norm(int l, int which) const {
  const Layer& L = layers_[static_cast<size_t>(l)];
  cuda::GemvFusion f;
  f.norm_w = which == 0 ? L.attn_norm : L.ffn_norm;
  f.norm_out = xn_.get();
  f.norm_out_type = cuda::act_type_for(which == 0 ? L.qkv.type : L.gate_up.type);
  f.norm_ss = norm_sums(l, which);
  return f;
}

cuda::GemvFusion CudaModel::norm_prologue(cuda::GemvFusion f, const float* norm_w) const {
  f.in_norm_w = norm_w;
  f.in_eps = config_.rms_eps;
  return f;
}

FusionPlan CudaModel::plan_fusions(StepClass k) const {
  using Sw = CudaSwitches;
  const ModelConfig& c = config_;
  const int n = k == StepClass::kOneToken    ? 1
                : k == StepClass::kFewTokens ? cuda::kGemvMaxTokens
                                             : cuda::kGemvMaxTokens + 1;
  // Only one-token steps fuse; PAGODA_CUDA_OMIT=norm leaves the norms out, folded or not.
  const unsigned fuse = k == StepClass::kOneToken ? fuse_ : 0;
  const bool norms = (omit_ & Sw::kOmitNorm) == 0;
  const cuda::DeviceBatch any_batch;  // the fusions' acceptance does not depend on it
  // Products over GGUF blocks take 8-bit activations on few tokens.
  auto q8_input = [n](const cuda::DeviceMatrix& w) {
    return n <= cuda::kGemvMaxTokens && cuda::Gemm::takes_q8(w);
  };
  // A one-token product over block weights quantizing its own f16 input.
  auto quantizes_input = [&](const cuda::DeviceMatrix& w) {
    return (fuse & Sw::kFuseQuant) && cuda::Gemm::takes_q8(w) && cuda::gemv_takes(w, 1, {});
  };
  // The qkv product storing q and the KV cache itself (RoPE epilogue).
  auto rope_fused = [&](int l) {
    return (fuse & Sw::kFuseRope) &&
           cuda::gemv_takes(layers_[static_cast<size_t>(l)].qkv, 1, rope_kv_fusion(l, any_batch));
  };
  // Block weights normalising their input in the product's prologue (they read the f32
  // residual): `f` with the norm, where the product takes it.
  auto prologue_takes = [&](const cuda::DeviceMatrix& w, const cuda::GemvFusion& f,
                            const float* norm_w, unsigned bit) {
    return norms && (fuse & bit) && cuda::Gemm::takes_q8(w) &&
           cuda::gemv_takes(w, 1, norm_prologue(f, norm_w));
  };
  // Folded norms: the product adding to the residual before layer l's norm `which` also
  // writes x * norm_w, un-normalised, and the sum of squares; the product after it (`after`,
  // with its own fusion `after_f`) scales its sums by the norm's scale. Not into fp16:
  // x * norm_w un-normalised can pass fp16's 65,504 where x / rms * norm_w does not, and
  // the fold gained nothing for Q4_0 (stop 28), so only bf16 and f32 activations fold.
  const bool fold = norms && (fuse & (Sw::kFuseNormAttn | Sw::kFuseNormFfn)) != 0;
  auto folds = [&](int l, int which, const cuda::DeviceMatrix& before,
                   const cuda::DeviceMatrix& after, const cuda::GemvFusion& after_f) {
    const bool stores =
        quantizes_input(before) || (!q8_input(before) && cuda::gemv_takes(before, 1, {}));
    const bool reads = (fuse & (which == 0 ? Sw::kFuseNormAttn : Sw::kFuseNormFfn)) &&
                       (!q8_input(after) || (which == 0 && quantizes_input(after))) &&
                       cuda::gemv_takes(after, 1, reading_norm(after_f, l, which));
    return fold && cuda::act_type_for(after.type) != cuda::ActType::kF16 && stores && reads;
  };

  FusionPlan plan;
  plan.layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    LayerPlan& p = plan.layers[static_cast<size_t>(l)];
    if (rope_fused(l)) {
      if (l > 0 && plan.layers[static_cast<size_t>(l - 1)].down_stores_norm)
        p.qkv = LayerPlan::Qkv::kRopeFolded;
      else if (prologue_takes(L.qkv, rope_kv_fusion(l, any_batch), L.attn_norm, Sw::kFuseNormAttn))
        p.qkv = LayerPlan::Qkv::kRopeNormIn;
      else
        p.qkv = LayerPlan::Qkv::kRope;
    }
    p.wo_stores_norm = folds(l, 1, L.wo, L.gate_up, {});
    if (p.wo_stores_norm)
      p.gate_up = LayerPlan::GateUp::kFolded;
    else if (prologue_takes(L.gate_up, {}, L.ffn_norm, Sw::kFuseNormFfn))
      p.gate_up = LayerPlan::GateUp::kNormIn;
    p.wo_gemv = quantizes_input(L.wo) || p.wo_stores_norm;
    p.down_q8_silu = q8_input(L.down) && !quantizes_input(L.down);
    if (!p.down_q8_silu) {
      p.down_stores_norm = l + 1 < c.n_layers && rope_fused(l + 1) &&
                           folds(l + 1, 0, L.down, layers_[static_cast<size_t>(l + 1)].qkv,
                                 rope_kv_fusion(l + 1, any_batch));
      p.down_gemv = quantizes_input(L.down) || p.down_stores_norm;
    }
    plan.clears_norm_sums = plan.clears_norm_sums || p.wo_stores_norm || p.down_stores_norm;
  }
  return plan;
}

}  // namespace pagoda
