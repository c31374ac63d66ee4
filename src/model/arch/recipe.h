// An architecture's layer recipe: what each block computes, stated as data that every
// backend executes. Architecture files (arch/*.cpp) fill it from the file's metadata;
// backends read it and never test the architecture's name. A backend that lacks one of
// the recipe's features refuses the model naming it (require_features), so a recipe can
// describe more than today's kernels run.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace pagoda {

enum class RopeStyle : uint8_t {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]); Llama GGUFs are converted for this
  kNeox,    // rotate halves (x[i], x[i + n_rot/2]); Qwen2 and most HF-native layouts
};

enum class NormKind : uint8_t { kRms, kLayer };

// The activation of the gated feed-forward: act(gate) * up.
enum class GatedAct : uint8_t { kSilu, kGelu };

struct ModelRecipe {
  // Norms. Every block normalises each sub-layer's input (pre-norm); `post_norms` adds a
  // norm on each sub-layer's output before the residual add (Gemma 2's sandwich).
  NormKind norm = NormKind::kRms;
  bool post_norms = false;

  // Attention: grouped-query (ModelConfig's head counts), with these variants.
  bool qkv_bias = false;      // biases on the q, k and v projections (Qwen2)
  bool qk_norm = false;       // RMSNorm of each q and k head before RoPE (Qwen3, Gemma 3)
  float attn_softcap = 0.0f;  // scores -> cap * tanh(scores / cap); 0: none (Gemma 2)
  // Sliding-window attention: a layer sees the last `sliding_window` positions; every
  // `global_every`-th layer (1-based) sees all of them (0: every layer slides).
  int sliding_window = 0;
  int global_every = 0;
  RopeStyle rope_style = RopeStyle::kNormal;

  // Feed-forward: down(act(gate x) * up x), gate and up stacked into one product where
  // their weight types agree; with experts, a router picks `experts_used` of `n_experts`.
  GatedAct ffn_act = GatedAct::kSilu;
  int n_experts = 0;
  int experts_used = 0;

  // Embedding and output.
  float embed_scale = 0.0f;  // token embeddings multiplied by it; 0: not scaled (Gemma: sqrt(dim))
  bool tied_output = false;  // no output matrix: the token embedding projects the logits
  float final_softcap = 0.0f;  // logits -> cap * tanh(logits / cap); 0: none

  // Whether layer l slides (sees only the last sliding_window positions).
  bool layer_slides(int l) const {
    return sliding_window > 0 && (global_every <= 0 || (l + 1) % global_every != 0);
  }
};

// The recipe's features beyond the plain Llama layer (pre-RMSNorm, SwiGLU, RoPE), as bits,
// so a backend can state what it implements.
enum RecipeFeature : uint32_t {
  kFeatQkvBias = 1u << 0,
  kFeatQkNorm = 1u << 1,
  kFeatAttnSoftcap = 1u << 2,
  kFeatSlidingWindow = 1u << 3,
  kFeatLayerNorm = 1u << 4,
  kFeatPostNorms = 1u << 5,
  kFeatGelu = 1u << 6,
  kFeatExperts = 1u << 7,
  kFeatEmbedScale = 1u << 8,
  kFeatFinalSoftcap = 1u << 9,
  kFeatNeoxRope = 1u << 10,
};

// The features `r` uses.
uint32_t recipe_features(const ModelRecipe& r);
// e.g. "sliding-window attention".
const char* feature_name(RecipeFeature f);
// Refuses (unsupported) a recipe using a feature outside `implemented`, naming the first
// such feature and the backend ("the CUDA backend").
Status require_features(const ModelRecipe& r, uint32_t implemented, const std::string& backend);

}  // namespace pagoda
