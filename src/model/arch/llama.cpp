// Llama family: Llama 2/3/3.1/3.2, TinyLlama, SmolLM, Mistral (without sliding window).
// The plain recipe: pre-RMSNorm, grouped-query attention with RoPE on adjacent pairs
// (GGUF converters permute Q/K for this), SwiGLU feed-forward; optional llama3 RoPE
// frequency factors (rope_freqs.weight); tied or separate output embedding.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace pagoda {

Status llama_read_config(const GgufFile& file, ModelConfig* config) {
  PAGODA_RETURN_IF_ERROR(read_llama_like_config(file, "llama", config));
  ModelRecipe& r = config->recipe;
  r.norm = NormKind::kRms;
  r.rope_style = RopeStyle::kNormal;
  r.ffn_act = GatedAct::kSilu;
  // Mistral v0.1 style: every layer slides (the backends refuse it until they run it).
  if (const auto w = file.get_int("llama.attention.sliding_window"); w && *w > 0)
    r.sliding_window = static_cast<int>(std::min<int64_t>(*w, 1 << 30));
  if (const auto e = file.get_int("llama.expert_count"); e && *e > 0) {
    r.n_experts = static_cast<int>(std::min<int64_t>(*e, 1 << 16));
    r.experts_used = static_cast<int>(
        std::clamp<int64_t>(file.get_int("llama.expert_used_count").value_or(0), 0, *e));
  }
  return Status::ok();
}

// LlamaForCausalLM: biases on q/k/v/o (attention_bias) and on the MLP (mlp_bias) are
// refused, as there is no o_proj or MLP bias in the recipe.
Status llama_read_hf_config(const nlohmann::json& j, ModelConfig* config) {
  config->arch = "llama";
  PAGODA_RETURN_IF_ERROR(read_llama_like_hf_config(j, config));
  ModelRecipe& r = config->recipe;
  r.norm = NormKind::kRms;
  r.rope_style = RopeStyle::kNeox;  // unpermuted Q/K rows (see arch.h)
  r.ffn_act = GatedAct::kSilu;
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    const auto v = j.find(key);
    if (v != j.end() && v->is_boolean() && v->get<bool>())
      return unsupported(std::string("config.json ") + key +
                         ": true (biases on every attention projection or the MLP) is not "
                         "supported yet");
  }
  return Status::ok();
}

}  // namespace pagoda
