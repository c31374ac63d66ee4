#include "ledger/model_shape.h"

namespace pagoda::ledger {

int64_t ModelShape::n_attention_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += attention(l) != LayerAttention::kNone;
  return n;
}

int64_t ModelShape::n_sliding_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += attention(l) == LayerAttention::kSliding;
  return n;
}

Status validate(const ModelShape& s) {
  const auto positive = [](int64_t v, const char* what) -> Status {
    if (v <= 0)
      return invalid_argument(
          str_format("%s must be positive, got %lld", what, static_cast<long long>(v)));
    return Status::ok();
  };
  PAGODA_RETURN_IF_ERROR(positive(s.n_layers, "the layer count"));
  PAGODA_RETURN_IF_ERROR(positive(s.hidden, "the hidden size"));
  PAGODA_RETURN_IF_ERROR(positive(s.n_heads, "the attention head count"));
  PAGODA_RETURN_IF_ERROR(positive(s.vocab, "the vocabulary size"));
  if (s.is_mla()) {
    PAGODA_RETURN_IF_ERROR(positive(s.qk_rope_head_dim, "qk_rope_head_dim"));
    PAGODA_RETURN_IF_ERROR(positive(s.qk_nope_head_dim, "qk_nope_head_dim"));
    PAGODA_RETURN_IF_ERROR(positive(s.v_head_dim, "v_head_dim"));
  } else {
    PAGODA_RETURN_IF_ERROR(positive(s.n_kv_heads, "the KV head count"));
    PAGODA_RETURN_IF_ERROR(positive(s.head_dim, "the head size"));
    if (s.n_heads % s.n_kv_heads != 0)
      return invalid_argument(str_format("%lld attention heads are not a multiple of %lld KV heads",
                                         static_cast<long long>(s.n_heads),
                                         static_cast<long long>(s.n_kv_heads)));
  }
  if (s.is_moe()) {
    PAGODA_RETURN_IF_ERROR(positive(s.expert_ffn, "the expert FFN size"));
    if (s.n_active_experts <= 0 || s.n_active_experts > s.n_experts)
      return invalid_argument(str_format("%lld active experts out of %lld",
                                         static_cast<long long>(s.n_active_experts),
                                         static_cast<long long>(s.n_experts)));
    if (!s.moe_layers.empty() && static_cast<int64_t>(s.moe_layers.size()) != s.n_layers)
      return invalid_argument("the MoE layer list does not have one entry per layer");
  }
  bool any_dense = !s.is_moe();
  for (int64_t l = 0; l < s.n_layers && !any_dense; ++l) any_dense = !s.layer_is_moe(l);
  if (any_dense) PAGODA_RETURN_IF_ERROR(positive(s.ffn, "the FFN size"));
  if (!s.layer_attention.empty() && static_cast<int64_t>(s.layer_attention.size()) != s.n_layers)
    return invalid_argument("the attention layer list does not have one entry per layer");
  if (s.n_sliding_layers() > 0) PAGODA_RETURN_IF_ERROR(positive(s.sliding_window, "the window"));
  return Status::ok();
}

ModelShape shape_from_config(const ModelConfig& c) {
  ModelShape s;
  s.name = c.name;
  s.arch = c.arch;
  s.n_layers = c.n_layers;
  s.hidden = c.dim;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv_heads;
  s.head_dim = c.head_dim;
  s.ffn = c.ffn_dim;
  s.vocab = c.n_vocab;
  s.max_context = c.context_length;
  s.rope_dims = c.rope_dims;
  s.tied_embeddings = c.recipe.tied_output;
  s.qkv_bias = c.recipe.qkv_bias;
  s.qk_norm = c.recipe.qk_norm;
  return s;
}

}  // namespace pagoda::ledger
