// Llama family: Llama 2/3/3.1/3.2, TinyLlama, SmolLM, Mistral (without sliding window).
// The plain recipe: pre-RMSNorm, grouped-query attention with RoPE on adjacent pairs
// (GGUF converters permute Q/K for this), SwiGLU feed-forward; optional llama3 RoPE
// frequency factors (rope_freqs.weight); tied or separate output embedding.
#include <algorithm>

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

}  // namespace pagoda
