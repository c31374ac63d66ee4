// Llama family: Llama 2/3/3.1/3.2, TinyLlama, SmolLM, Mistral (without sliding window).
// RMSNorm, RoPE on adjacent pairs (GGUF converters permute Q/K for this), SwiGLU FFN,
// grouped-query attention, optional llama3 RoPE frequency factors (rope_freqs.weight),
// tied or separate output embedding.
#include "model/arch/arch.h"

namespace pagoda {

Status llama_read_config(const GgufFile& file, ModelConfig* config) {
  PAGODA_RETURN_IF_ERROR(read_llama_like_config(file, "llama", config));
  config->rope_style = RopeStyle::kNormal;
  config->qkv_bias = false;
  if (file.find("llama.attention.sliding_window"))
    return unsupported("sliding-window attention (Mistral v0.1 style) is not supported yet");
  return Status::ok();
}

}  // namespace pagoda
