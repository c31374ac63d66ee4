// The shape of a decoder-only transformer as far as memory is concerned: enough to count
// every weight and every byte of KV cache, for dense, grouped-query, mixture-of-experts,
// multi-head latent attention (DeepSeek) and sliding-window models. It is filled from a
// GGUF file, a Hugging Face config.json or the built-in catalog (ledger/sources.h), and
// from the engine's own ModelConfig (shape_from_config).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"

namespace pagoda::ledger {

// What a layer keeps in the KV cache.
enum class LayerAttention : uint8_t {
  kFull,     // every token of the context
  kSliding,  // only the last `sliding_window` tokens
  kNone,     // no KV cache (recurrent or linear-attention mixer)
};

struct ModelShape {
  std::string name;  // for display
  std::string arch;  // "llama", "qwen2", "qwen3_moe", "deepseek_v3", "gemma3", ...

  int64_t n_layers = 0;
  int64_t hidden = 0;      // residual stream width
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // < n_heads: grouped-query attention
  int64_t head_dim = 0;    // size of each K, V (and Q) head
  int64_t ffn = 0;         // inner size of the dense feed-forward layers (SwiGLU: 3 matrices)
  int64_t vocab = 0;
  int64_t max_context = 0;  // trained context (max_position_embeddings); 0 when unknown
  int64_t rope_dims = 0;    // rotated dims per head (workspace tables); 0 means head_dim

  bool tied_embeddings = false;  // the output projection reuses the token embedding
  bool qkv_bias = false;         // biases on q, k and v (Qwen2)
  bool qk_norm = false;          // per-head RMSNorm weights on q and k (Qwen3, Gemma 3)
  int norms_per_layer = 2;       // RMSNorm vectors of size `hidden` per layer (Gemma 3: 4)

  // Mixture of experts. n_experts == 0 means a dense model.
  int64_t n_experts = 0;           // routed experts per MoE layer
  int64_t n_active_experts = 0;    // experts each token is routed to
  int64_t n_shared_experts = 0;    // always-on experts (DeepSeek)
  int64_t expert_ffn = 0;          // inner size of one routed expert
  int64_t shared_expert_ffn = 0;   // inner size of one shared expert; 0 means expert_ffn
  int64_t first_dense_layers = 0;  // leading layers with a dense FFN (DeepSeek first_k_dense)
  bool expert_score_bias = false;  // a routing bias per expert (DeepSeek-V3 noaux_tc)
  // Optional per-layer override: 1 = MoE FFN, 0 = dense FFN. Empty: the rule above.
  std::vector<uint8_t> moe_layers;

  // Multi-head latent attention (DeepSeek-V2/V3). kv_lora_rank > 0 turns it on: each
  // layer caches one latent of kv_lora_rank + qk_rope_head_dim per token, for all heads.
  int64_t kv_lora_rank = 0;
  int64_t q_lora_rank = 0;  // 0: queries are projected directly from the hidden state
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // Sliding-window attention: layers marked kSliding keep the last `sliding_window` tokens.
  int64_t sliding_window = 0;
  std::vector<LayerAttention> layer_attention;  // empty: every layer kFull

  bool is_moe() const { return n_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  LayerAttention attention(int64_t layer) const {
    return layer_attention.empty() ? LayerAttention::kFull
                                   : layer_attention[static_cast<size_t>(layer)];
  }
  bool layer_is_moe(int64_t layer) const {
    if (!is_moe()) return false;
    if (!moe_layers.empty()) return moe_layers[static_cast<size_t>(layer)] != 0;
    return layer >= first_dense_layers;
  }
  int64_t shared_ffn() const { return shared_expert_ffn > 0 ? shared_expert_ffn : expert_ffn; }
  // Query width (all heads) and the width attention writes back before the output matrix.
  int64_t q_dim() const {
    return is_mla() ? n_heads * (qk_nope_head_dim + qk_rope_head_dim) : n_heads * head_dim;
  }
  int64_t attn_out_dim() const { return is_mla() ? n_heads * v_head_dim : n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t rotary_dims() const {
    return rope_dims > 0 ? rope_dims : is_mla() ? qk_rope_head_dim : head_dim;
  }
  int64_t n_attention_layers() const;
  int64_t n_sliding_layers() const;
};

// Checks that the numbers describe a model (positive sizes, heads divisible, per-layer
// vectors of the right length); an error names the first problem.
Status validate(const ModelShape& shape);

// The shape of a model Pagoda's engine loaded: the same numbers the engine sizes its
// buffers with (dense, GQA, optional q/k/v biases, tied embeddings).
ModelShape shape_from_config(const ModelConfig& config);

}  // namespace pagoda::ledger
