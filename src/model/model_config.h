// Hyperparameters of a decoder-only transformer, read from GGUF metadata by the
// architecture's file in arch/.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

enum class RopeStyle {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]); Llama GGUFs are converted for this
  kNeox,    // rotate halves (x[i], x[i + n_rot/2]); Qwen2 and most HF-native layouts
};

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

  RopeStyle rope_style = RopeStyle::kNormal;
  int rope_dims = 0;  // leading dims of each head that are rotated
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;        // linear scaling: position multiplier
  bool rope_has_freq_factors = false;  // llama3-style per-dimension factors (rope_freqs.weight)

  bool qkv_bias = false;         // Qwen2 adds biases to q, k and v
  bool tied_embeddings = false;  // no output.weight: the output projection is token_embd

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

}  // namespace pagoda
