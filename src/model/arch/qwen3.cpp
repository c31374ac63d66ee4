// Qwen3 (dense): Qwen2's layer without the q/k/v biases and with an RMSNorm over each
// query and key head (one weight vector of head_dim for all query heads, one for all key
// heads) between the projection and RoPE; RoPE on rotated halves (NeoX) as llama.cpp runs
// qwen3 files. The head size is a key of its own (attention.key_length, config.json
// head_dim): 128 in the published models whatever their width.
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"
#include "model/hf_json.h"

namespace pagoda {
namespace {

void qwen3_recipe(ModelRecipe* r) {
  r->norm = NormKind::kRms;
  r->qk_norm = true;
  r->rope_style = RopeStyle::kNeox;
  r->ffn_act = GatedAct::kSilu;
}

}  // namespace

Status qwen3_read_config(const GgufFile& file, ModelConfig* config) {
  PAGODA_RETURN_IF_ERROR(read_llama_like_config(file, "qwen3", config));
  qwen3_recipe(&config->recipe);
  return Status::ok();
}

// Qwen3ForCausalLM. attention_bias true (biases the recipe does not add) and sliding-window
// layers are refused by name.
Status qwen3_read_hf_config(const nlohmann::json& j, ModelConfig* config) {
  config->arch = "qwen3";
  PAGODA_RETURN_IF_ERROR(read_llama_like_hf_config(j, config));
  qwen3_recipe(&config->recipe);
  if (const nlohmann::json* b = find_key(j, "attention_bias");
      b != nullptr && !(b->is_boolean() && !b->get<bool>()))
    return unsupported("config.json attention_bias " + b->dump() +
                       " (q/k/v/o biases) is not supported for Qwen3");
  return refuse_use_sliding_window(j);
}

}  // namespace pagoda
