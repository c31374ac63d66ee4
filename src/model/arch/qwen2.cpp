// Qwen2 / Qwen2.5: the Llama layer with biases on the q, k and v projections and RoPE
// over rotated halves (NeoX style), as the HF checkpoints are converted without the
// Q/K permutation Llama files get.
#include "model/arch/arch.h"

namespace pagoda {

Status qwen2_read_config(const GgufFile& file, ModelConfig* config) {
  PAGODA_RETURN_IF_ERROR(read_llama_like_config(file, "qwen2", config));
  config->rope_style = RopeStyle::kNeox;
  config->qkv_bias = true;
  return Status::ok();
}

}  // namespace pagoda
