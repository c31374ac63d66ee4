#include "ledger/memory.h"

#include <algorithm>
#include <cctype>

#include "core/arith.h"
#include "core/dtype.h"
#include "core/text.h"

namespace pagoda::ledger {
namespace {

// Types of the serving formats, in bits per block.
struct ServeType {
  const char* name;
  WeightFamily family;
  int64_t block_elems, block_bits, row_extra_bits;
};
constexpr ServeType kServeTypes[] = {
    {"fp32", WeightFamily::kFloat, 1, 32, 0},
    {"bf16", WeightFamily::kFloat, 1, 16, 0},
    {"fp16", WeightFamily::kFloat, 1, 16, 0},
    // e4m3, one per-tensor scale (4 bytes per matrix, not counted).
    {"fp8", WeightFamily::kServe, 1, 8, 0},
    // One fp32 scale per output channel (W8A8 per-channel).
    {"int8", WeightFamily::kServe, 1, 8, 32},
    // AWQ/GPTQ: 4-bit weights, per group of 128 one fp16 scale and one 4-bit zero point.
    {"int4-g128", WeightFamily::kServe, 128, 128 * 4 + 16 + 4, 0},
    // bitsandbytes NF4 defaults: blocks of 64 with one fp32 absmax (no double quantization).
    {"nf4", WeightFamily::kServe, 64, 64 * 4 + 32, 0},
};

// GGUF types offered as --dtype: the block types (plain f32/f16/bf16 map onto the float
// family above).
constexpr DType kGgufTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                                DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                                DType::kQ5_K, DType::kQ6_K};

WeightType make(const ServeType& t) {
  return {t.name, t.family, t.block_elems, t.block_bits, t.row_extra_bits};
}

// Where a tensor of `role` is stored when the model's weights are of `type`.
WeightType storage_type(WeightRole role, const WeightType& type) {
  if (role == WeightRole::kLinear || type.family == WeightFamily::kFloat) return type;
  const bool gguf = type.family == WeightFamily::kGguf;
  if (role == WeightRole::kEmbedding || role == WeightRole::kOutput)
    return gguf ? type : make(kServeTypes[1]);
  return gguf ? make(kServeTypes[0]) : make(kServeTypes[1]);  // vectors and routers
}

}  // namespace

Result<WeightType> parse_weight_type(std::string_view name) {
  std::string n = ascii_lower(name);
  if (n == "f32" || n == "float32") n = "fp32";
  if (n == "f16" || n == "float16" || n == "half") n = "fp16";
  if (n == "bfloat16") n = "bf16";
  if (n == "int4" || n == "awq" || n == "gptq") n = "int4-g128";
  if (n == "fp8_e4m3" || n == "float8") n = "fp8";
  for (const ServeType& t : kServeTypes)
    if (n == t.name) return make(t);
  for (DType d : kGgufTypes) {
    const DTypeInfo& info = dtype_info(d);
    if (n == ascii_lower(info.name)) {
      return WeightType{n, WeightFamily::kGguf, info.block_elems,
                        static_cast<int64_t>(info.block_bytes) * 8, 0};
    }
  }
  return invalid_argument("unknown weight type '" + std::string(name) +
                          "' (known: " + weight_type_names() + ")");
}

std::string weight_type_names() {
  std::string s;
  for (const ServeType& t : kServeTypes) s += std::string(s.empty() ? "" : " ") + t.name;
  for (DType d : kGgufTypes) s += " " + ascii_lower(dtype_info(d).name);
  return s;
}

Result<KvDtype> parse_kv_dtype(std::string_view name) {
  const std::string n = ascii_lower(name);
  if (n == "auto" || n == "bf16" || n == "bfloat16") return KvDtype::kBf16;
  if (n == "fp16" || n == "f16" || n == "float16") return KvDtype::kFp16;
  if (n == "fp8" || n == "fp8_e4m3" || n == "fp8_e5m2") return KvDtype::kFp8;
  if (n == "int8" || n == "q8_0") return KvDtype::kInt8;
  if (n == "int4" || n == "q4_0") return KvDtype::kInt4;
  return invalid_argument("unknown KV cache type '" + std::string(name) +
                          "' (known: bf16 fp16 fp8 int8 int4)");
}

std::string_view kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kFp16:
      return "fp16";
    case KvDtype::kFp8:
      return "fp8";
    case KvDtype::kInt8:
      return "int8";
    case KvDtype::kInt4:
      return "int4";
  }
  return "?";
}

int64_t kv_vector_bytes(KvDtype t, int64_t elems) {
  switch (t) {
    case KvDtype::kBf16:
    case KvDtype::kFp16:
      return 2 * elems;
    case KvDtype::kFp8:
      return elems;
    case KvDtype::kInt8:
      return ceil_div(elems, 32) * 34;  // q8_0: 32 int8 + fp16 scale
    case KvDtype::kInt4:
      return ceil_div(elems, 32) * 18;  // q4_0: 32 nibbles + fp16 scale
  }
  return 0;
}

std::vector<LayerRange> pipeline_stages(int64_t n_layers, int pp) {
  std::vector<int64_t> sizes(static_cast<size_t>(pp), n_layers / pp);
  const int64_t rest = n_layers % pp;
  for (int64_t i = 2; i < rest + 2; ++i) ++sizes[static_cast<size_t>(pp - i)];
  std::vector<LayerRange> stages;
  int64_t begin = 0;
  for (int64_t n : sizes) {
    stages.push_back({begin, begin + n});
    begin += n;
  }
  return stages;
}

Status check_parallel(const ModelShape& s, int tp, int pp) {
  if (tp < 1 || pp < 1) return invalid_argument("parallel sizes must be at least 1");
  if (s.n_heads % tp != 0)
    return invalid_argument(
        str_format("tensor parallel size %d does not divide the %lld attention heads", tp,
                   static_cast<long long>(s.n_heads)));
  if (!s.is_mla() && s.n_kv_heads % tp != 0 && tp % s.n_kv_heads != 0)
    return invalid_argument(
        str_format("tensor parallel size %d neither divides nor is a multiple of the %lld KV "
                   "heads",
                   tp, static_cast<long long>(s.n_kv_heads)));
  if (pp > s.n_layers)
    return invalid_argument(str_format("pipeline parallel size %d exceeds the %lld layers", pp,
                                       static_cast<long long>(s.n_layers)));
  return Status::ok();
}

int64_t kv_heads_per_rank(const ModelShape& s, int tp) {
  return s.n_kv_heads >= tp ? s.n_kv_heads / tp : 1;
}

int64_t kv_layer_bytes_per_token(const ModelShape& s, int64_t layer, KvDtype t, int tp) {
  if (s.attention(layer) == LayerAttention::kNone) return 0;
  if (s.is_mla()) return kv_vector_bytes(t, s.kv_lora_rank + s.qk_rope_head_dim);
  return 2 * kv_heads_per_rank(s, tp) * kv_vector_bytes(t, s.head_dim);
}

KvRate kv_rate(const ModelShape& s, KvDtype t, int tp, LayerRange layers) {
  KvRate r;
  r.window = s.sliding_window;
  for (int64_t l = layers.begin; l < layers.end; ++l) {
    const int64_t b = kv_layer_bytes_per_token(s, l, t, tp);
    (s.attention(l) == LayerAttention::kSliding ? r.sliding : r.full) += b;
  }
  return r;
}

int64_t kv_bytes_per_token(const ModelShape& s, KvDtype t, int tp) {
  return kv_rate(s, t, tp, {0, s.n_layers}).total();
}

int64_t kv_bytes_per_sequence(const KvRate& r, int64_t tokens, int block_size) {
  if (tokens <= 0) return 0;
  const int64_t blocks = ceil_div(tokens, block_size);
  int64_t bytes = r.full * blocks * block_size;
  if (r.sliding > 0) {
    const int64_t window_blocks = ceil_div(r.window + block_size - 1, block_size);
    bytes += r.sliding * std::min(blocks, window_blocks) * block_size;
  }
  return bytes;
}

int64_t kv_pool_blocks(const ModelShape& s, KvDtype t, int64_t budget_bytes, int block_size,
                       int tp) {
  const int64_t per_block = kv_bytes_per_token(s, t, tp) * block_size;
  if (budget_bytes <= 0 || per_block <= 0) return 0;
  return budget_bytes / per_block;
}

int64_t mha_equivalent_kv_bytes_per_token(const ModelShape& s, KvDtype t, int tp) {
  const int64_t heads = s.n_heads / tp;
  const int64_t k = s.is_mla() ? s.qk_nope_head_dim + s.qk_rope_head_dim : s.head_dim;
  const int64_t v = s.is_mla() ? s.v_head_dim : s.head_dim;
  return s.n_attention_layers() * heads * (kv_vector_bytes(t, k) + kv_vector_bytes(t, v));
}

std::vector<WeightPart> stage_weight_parts(const ModelShape& s, int tp, LayerRange layers,
                                           bool first_stage, bool last_stage) {
  using R = WeightRole;
  std::vector<WeightPart> p;
  const int64_t h = s.hidden;
  const int64_t vocab_rank = ceil_div(s.vocab, tp);
  if (first_stage) p.push_back({"embedding", R::kEmbedding, vocab_rank, h, 1});
  for (int64_t l = layers.begin; l < layers.end; ++l) {
    p.push_back({"norms", R::kVector, 1, h, s.norms_per_layer});
    if (s.attention(l) != LayerAttention::kNone) {
      const int64_t heads = s.n_heads / tp;
      if (s.is_mla()) {
        const int64_t qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
        if (s.q_lora_rank > 0) {
          p.push_back({"attention", R::kLinear, s.q_lora_rank, h, 1});  // q_a (replicated)
          p.push_back({"norms", R::kVector, 1, s.q_lora_rank, 1});
          p.push_back({"attention", R::kLinear, heads * qk, s.q_lora_rank, 1});  // q_b
        } else {
          p.push_back({"attention", R::kLinear, heads * qk, h, 1});
        }
        // kv_a (replicated) makes the cached latent and the shared rotary key.
        p.push_back({"attention", R::kLinear, s.kv_lora_rank + s.qk_rope_head_dim, h, 1});
        p.push_back({"norms", R::kVector, 1, s.kv_lora_rank, 1});
        p.push_back({"attention", R::kLinear, heads * (s.qk_nope_head_dim + s.v_head_dim),
                     s.kv_lora_rank, 1});
        p.push_back({"attention", R::kLinear, h, heads * s.v_head_dim, 1});
      } else {
        const int64_t q = heads * s.head_dim, kv = kv_heads_per_rank(s, tp) * s.head_dim;
        p.push_back({"attention", R::kLinear, q, h, 1});
        p.push_back({"attention", R::kLinear, kv, h, 2});
        p.push_back({"attention", R::kLinear, h, q, 1});
        if (s.qkv_bias) p.push_back({"attention", R::kVector, 1, q + 2 * kv, 1});
        if (s.qk_norm) p.push_back({"norms", R::kVector, 1, s.head_dim, 2});
      }
    }
    if (s.layer_is_moe(l)) {
      p.push_back({"router", R::kRouter, s.n_experts, h, 1});
      if (s.expert_score_bias) p.push_back({"router", R::kVector, 1, s.n_experts, 1});
      const int64_t e = ceil_div(s.expert_ffn, tp);
      p.push_back({"experts", R::kLinear, e, h, 2 * s.n_experts});
      p.push_back({"experts", R::kLinear, h, e, s.n_experts});
      if (s.n_shared_experts > 0) {
        const int64_t se = ceil_div(s.shared_ffn(), tp);
        p.push_back({"shared experts", R::kLinear, se, h, 2 * s.n_shared_experts});
        p.push_back({"shared experts", R::kLinear, h, se, s.n_shared_experts});
      }
    } else {
      const int64_t f = ceil_div(s.ffn, tp);
      p.push_back({"ffn", R::kLinear, f, h, 2});
      p.push_back({"ffn", R::kLinear, h, f, 1});
    }
  }
  if (last_stage) {
    p.push_back({"norms", R::kVector, 1, h, 1});
    if (!s.tied_embeddings)
      p.push_back({"output", R::kOutput, vocab_rank, h, 1});
    else if (!first_stage)
      p.push_back({"embedding", R::kEmbedding, vocab_rank, h, 1});  // the tied copy
  }
  return p;
}

int64_t part_bytes(const WeightPart& part, const WeightType& type) {
  const WeightType t = storage_type(part.role, type);
  const int64_t extra = part.role == WeightRole::kLinear ? t.row_extra_bits : 0;
  const int64_t row_bits = ceil_div(part.cols, t.block_elems) * t.block_bits + extra;
  return part.count * ceil_div(part.rows * row_bits, 8);
}

int64_t stage_weight_bytes(const ModelShape& s, const WeightType& type, int tp, LayerRange layers,
                           bool first_stage, bool last_stage) {
  int64_t n = 0;
  for (const WeightPart& p : stage_weight_parts(s, tp, layers, first_stage, last_stage))
    n += part_bytes(p, type);
  return n;
}

int64_t weight_bytes(const ModelShape& s, const WeightType& type, int tp) {
  return stage_weight_bytes(s, type, tp, {0, s.n_layers}, true, true);
}

int64_t weight_params(const ModelShape& s) {
  int64_t n = 0;
  for (const WeightPart& p : stage_weight_parts(s, 1, {0, s.n_layers}, true, true))
    n += p.rows * p.cols * p.count;
  return n;
}

}  // namespace pagoda::ledger
