#include "model/arch/recipe.h"

namespace pagoda {

uint32_t recipe_features(const ModelRecipe& r) {
  uint32_t f = 0;
  if (r.qkv_bias) f |= kFeatQkvBias;
  if (r.qk_norm) f |= kFeatQkNorm;
  if (r.attn_softcap > 0) f |= kFeatAttnSoftcap;
  if (r.sliding_window > 0) f |= kFeatSlidingWindow;
  if (r.norm == NormKind::kLayer) f |= kFeatLayerNorm;
  if (r.post_norms) f |= kFeatPostNorms;
  if (r.ffn_act == GatedAct::kGelu) f |= kFeatGelu;
  if (r.n_experts > 0) f |= kFeatExperts;
  if (r.embed_scale > 0) f |= kFeatEmbedScale;
  if (r.final_softcap > 0) f |= kFeatFinalSoftcap;
  if (r.rope_style == RopeStyle::kNeox) f |= kFeatNeoxRope;
  return f;
}

const char* feature_name(RecipeFeature f) {
  switch (f) {
    case kFeatQkvBias:
      return "q/k/v biases";
    case kFeatQkNorm:
      return "q/k norms";
    case kFeatAttnSoftcap:
      return "attention logit soft-capping";
    case kFeatSlidingWindow:
      return "sliding-window attention";
    case kFeatLayerNorm:
      return "LayerNorm";
    case kFeatPostNorms:
      return "post-sub-layer (sandwich) norms";
    case kFeatGelu:
      return "GeGLU feed-forward";
    case kFeatExperts:
      return "mixture of experts";
    case kFeatEmbedScale:
      return "embedding scale";
    case kFeatFinalSoftcap:
      return "output logit soft-capping";
    case kFeatNeoxRope:
      return "NeoX-style RoPE";
  }
  return "an unnamed feature";
}

Status require_features(const ModelRecipe& r, uint32_t implemented, const std::string& backend) {
  const uint32_t missing = recipe_features(r) & ~implemented;
  if (missing == 0) return Status::ok();
  const auto first = static_cast<RecipeFeature>(missing & (~missing + 1));  // lowest set bit
  return unsupported(std::string(feature_name(first)) + " is not supported by " + backend + " yet");
}

}  // namespace pagoda
