// Qwen2 / Qwen2.5: the Llama recipe with biases on the q, k and v projections and RoPE
// over rotated halves (NeoX style), as the HF checkpoints are converted without the
// Q/K permutation Llama files get.
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace pagoda {

Status qwen2_read_config(const GgufFile& file, ModelConfig* config) {
  PAGODA_RETURN_IF_ERROR(read_llama_like_config(file, "qwen2", config));
  ModelRecipe& r = config->recipe;
  r.norm = NormKind::kRms;
  r.qkv_bias = true;
  r.rope_style = RopeStyle::kNeox;
  r.ffn_act = GatedAct::kSilu;
  return Status::ok();
}

// Qwen2ForCausalLM: sliding-window layers (use_sliding_window) are refused until the
// backends run them.
Status qwen2_read_hf_config(const nlohmann::json& j, ModelConfig* config) {
  config->arch = "qwen2";
  PAGODA_RETURN_IF_ERROR(read_llama_like_hf_config(j, config));
  ModelRecipe& r = config->recipe;
  r.norm = NormKind::kRms;
  r.qkv_bias = true;
  r.rope_style = RopeStyle::kNeox;
  r.ffn_act = GatedAct::kSilu;
  return refuse_use_sliding_window(j);
}

}  // namespace pagoda
