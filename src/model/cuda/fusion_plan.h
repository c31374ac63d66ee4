// Which kernels each layer of a step runs, and fused how. The CUDA backend decides it once
// per kind of step (one token, a few tokens, a batch: StepClass) from the recipe, the
// layers' weight types and the fusion switches (PAGODA_CUDA_FUSE), in
// CudaModel::plan_fusions (fusion_plan.cpp); the forward pass (cuda_forward.cpp) only
// follows the plan. Measurements behind each fusion: bench/RESULTS.md, stops 17, 27-29.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

// Steps whose kernels differ: one token (the fused one-token kernels), up to
// cuda::kGemvMaxTokens tokens (products over GGUF blocks take 8-bit activations), more.
enum class StepClass : uint8_t { kOneToken, kFewTokens, kBatch };

struct LayerPlan {
  // The attention norm and the qkv product.
  enum class Qkv : uint8_t {
    kPlain,       // norm, product, then RoPE + KV store (rope_qkv_store)
    kRope,        // norm, then a one-token product whose epilogue applies RoPE and stores K/V
    kRopeNormIn,  // the same, its prologue normalising the residual (block weights)
    kRopeFolded,  // the same, scaled by the norm the previous layer's down product stored
  };
  // The FFN norm and the gate_up product.
  enum class GateUp : uint8_t {
    kPlain,   // norm, then product
    kNormIn,  // one product whose prologue normalises the residual (block weights)
    kFolded,  // one product scaled by the norm wo stored
  };
  Qkv qkv = Qkv::kPlain;
  GateUp gate_up = GateUp::kPlain;
  // wo and down add into the residual through the one-token kernel (gemv_fused): they
  // quantize their own f16 input, or store the next norm's input and sums.
  bool wo_gemv = false, down_gemv = false;
  bool wo_stores_norm = false;    // wo stores the FFN norm's input (gate_up kFolded)
  bool down_stores_norm = false;  // down stores the next layer's attention norm's input
  bool down_q8_silu = false;      // silu_mul writes down's 8-bit input itself
};

struct FusionPlan {
  std::vector<LayerPlan> layers;
  // Some norm is folded: its sums of squares are zeroed at the start of the step.
  bool clears_norm_sums = false;
};

}  // namespace pagoda
