// Hyperparameters of a decoder-only transformer and its layer recipe, read from GGUF
// metadata by the architecture's file in arch/.
#pragma once

#include <cstdint>
#include <string>

#include "model/arch/recipe.h"

namespace pagoda {

struct ModelConfig {
  std::string arch;  // GGUF general.architecture
  std::string name;  // general.name, for display
  int n_layers = 0;
  int dim = 0;  // embedding width
  int n_heads = 0;
  int n_kv_heads = 0;  // < n_heads means grouped-query attention
  int head_dim = 0;
  int ffn_dim = 0;
  int n_vocab = 0;
  int context_length = 0;  // trained context
  float rms_eps = 1e-5f;

  int rope_dims = 0;  // leading dims of each head that are rotated
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;        // linear scaling: position multiplier
  bool rope_has_freq_factors = false;  // llama3-style per-dimension factors (rope_freqs.weight)

  ModelRecipe recipe;  // what each layer computes (arch/recipe.h)

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

}  // namespace pagoda
