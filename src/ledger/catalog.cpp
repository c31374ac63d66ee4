// Published configurations (the config.json of each Hugging Face repository), so users
// can plan without downloading anything. Only the numbers that decide memory are kept.
#include <algorithm>
#include <cctype>

#include "core/text.h"
#include "ledger/sources.h"

namespace pagoda::ledger {
namespace {

ModelShape dense(const char* name, const char* arch, int64_t layers, int64_t hidden, int64_t heads,
                 int64_t kv_heads, int64_t head_dim, int64_t ffn, int64_t vocab, int64_t context,
                 bool tied) {
  ModelShape s;
  s.name = name;
  s.arch = arch;
  s.n_layers = layers;
  s.hidden = hidden;
  s.n_heads = heads;
  s.n_kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.ffn = ffn;
  s.vocab = vocab;
  s.max_context = context;
  s.tied_embeddings = tied;
  return s;
}

ModelShape llama_3_1_8b() {
  return dense("Llama-3.1-8B", "llama", 32, 4096, 32, 8, 128, 14336, 128256, 131072, false);
}
ModelShape llama_3_1_70b() {
  return dense("Llama-3.1-70B", "llama", 80, 8192, 64, 8, 128, 28672, 128256, 131072, false);
}
ModelShape llama_3_1_405b() {
  return dense("Llama-3.1-405B", "llama", 126, 16384, 128, 8, 128, 53248, 128256, 131072, false);
}
ModelShape llama_3_2_1b() {
  return dense("Llama-3.2-1B", "llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, true);
}
ModelShape qwen2_5_7b() {
  ModelShape s =
      dense("Qwen2.5-7B-Instruct", "qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 32768, false);
  s.qkv_bias = true;
  return s;
}
ModelShape qwen2_5_72b() {
  ModelShape s =
      dense("Qwen2.5-72B-Instruct", "qwen2", 80, 8192, 64, 8, 128, 29568, 152064, 32768, false);
  s.qkv_bias = true;
  return s;
}
ModelShape qwen3_8b() {
  ModelShape s = dense("Qwen3-8B", "qwen3", 36, 4096, 32, 8, 128, 12288, 151936, 40960, false);
  s.qk_norm = true;
  return s;
}
ModelShape qwen3_32b() {
  ModelShape s = dense("Qwen3-32B", "qwen3", 64, 5120, 64, 8, 128, 25600, 151936, 40960, false);
  s.qk_norm = true;
  return s;
}
ModelShape qwen3_235b_a22b() {
  // Every layer is MoE (decoder_sparse_step 1, no mlp_only_layers); intermediate_size
  // 12288 is unused.
  ModelShape s =
      dense("Qwen3-235B-A22B", "qwen3_moe", 94, 4096, 64, 4, 128, 12288, 151936, 40960, false);
  s.qk_norm = true;
  s.n_experts = 128;
  s.n_active_experts = 8;
  s.expert_ffn = 1536;
  return s;
}
ModelShape mistral_7b() {
  // v0.3: 32768-token vocabulary, no sliding window (v0.1 had a 4096-token window).
  return dense("Mistral-7B-Instruct-v0.3", "mistral", 32, 4096, 32, 8, 128, 14336, 32768, 32768,
               false);
}
ModelShape mixtral_8x7b() {
  ModelShape s = dense("Mixtral-8x7B-Instruct-v0.1", "mixtral", 32, 4096, 32, 8, 128, 14336, 32000,
                       32768, false);
  s.n_experts = 8;
  s.n_active_experts = 2;
  s.expert_ffn = 14336;
  return s;
}
ModelShape deepseek_v3() {
  // 61 layers (the multi-token-prediction layer 61 of the checkpoint is not counted: it is
  // only used for speculative decoding). num_key_value_heads is 128 in the config but MLA
  // caches one latent per layer.
  ModelShape s =
      dense("DeepSeek-V3", "deepseek_v3", 61, 7168, 128, 128, 192, 18432, 129280, 163840, false);
  s.kv_lora_rank = 512;
  s.q_lora_rank = 1536;
  s.qk_nope_head_dim = 128;
  s.qk_rope_head_dim = 64;
  s.v_head_dim = 128;
  s.n_experts = 256;
  s.n_active_experts = 8;
  s.n_shared_experts = 1;
  s.expert_ffn = 2048;
  s.first_dense_layers = 3;
  s.expert_score_bias = true;  // topk_method noaux_tc: e_score_correction_bias
  return s;
}
ModelShape gemma_3_27b() {
  // The text model of gemma-3-27b-it (its vision tower, about 0.4B parameters, is not
  // counted). 5 local layers with a 1024-token window, then 1 global layer.
  ModelShape s =
      dense("gemma-3-27b-it", "gemma3", 62, 5376, 32, 16, 128, 21504, 262208, 131072, true);
  s.qk_norm = true;
  s.norms_per_layer = 4;
  s.sliding_window = 1024;
  for (int64_t l = 0; l < s.n_layers; ++l)
    s.layer_attention.push_back((l + 1) % 6 == 0 ? LayerAttention::kFull
                                                 : LayerAttention::kSliding);
  return s;
}
ModelShape smollm2_135m() {
  return dense("SmolLM2-135M-Instruct", "llama", 30, 576, 9, 3, 64, 1536, 49152, 8192, true);
}

constexpr CatalogEntry kCatalog[] = {
    {"llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "bf16", "dense, GQA 32q/8kv",
     llama_3_1_8b},
    {"llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", "bf16", "dense, GQA 64q/8kv",
     llama_3_1_70b},
    {"llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct", "bf16", "dense, GQA 128q/8kv",
     llama_3_1_405b},
    {"llama-3.2-1b", "meta-llama/Llama-3.2-1B-Instruct", "bf16",
     "dense, GQA 32q/8kv, tied embeddings", llama_3_2_1b},
    {"qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", "bf16", "dense, GQA 28q/4kv, qkv bias", qwen2_5_7b},
    {"qwen2.5-72b", "Qwen/Qwen2.5-72B-Instruct", "bf16", "dense, GQA 64q/8kv, qkv bias",
     qwen2_5_72b},
    {"qwen3-8b", "Qwen/Qwen3-8B", "bf16", "dense, GQA 32q/8kv, qk-norm", qwen3_8b},
    {"qwen3-32b", "Qwen/Qwen3-32B", "bf16", "dense, GQA 64q/8kv, qk-norm", qwen3_32b},
    {"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "bf16", "MoE 128 experts (8 active), GQA 64q/4kv",
     qwen3_235b_a22b},
    {"mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3", "bf16", "dense, GQA 32q/8kv", mistral_7b},
    {"mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", "bf16",
     "MoE 8 experts (2 active), GQA 32q/8kv", mixtral_8x7b},
    {"deepseek-v3", "deepseek-ai/DeepSeek-V3", "fp8",
     "MoE 256+1 experts (8 active), MLA latent 512+64", deepseek_v3},
    {"gemma-3-27b", "google/gemma-3-27b-it", "bf16",
     "dense, GQA 32q/16kv, 52 of 62 layers with a 1024-token window", gemma_3_27b},
    {"smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct", "bf16",
     "dense, GQA 9q/3kv, tied embeddings", smollm2_135m},
};

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::span<const CatalogEntry> catalog() {
  return kCatalog;
}

const CatalogEntry* find_in_catalog(std::string_view name) {
  const std::string n = ascii_lower(name);
  for (const CatalogEntry& e : kCatalog)
    if (e.name == n) return &e;
  return nullptr;
}

std::string_view closest_catalog_name(std::string_view name) {
  const std::string n = ascii_lower(name);
  std::string_view best;
  size_t best_d = SIZE_MAX;
  for (const CatalogEntry& e : kCatalog) {
    const size_t d = edit_distance(n, e.name);
    if (d < best_d) {
      best_d = d;
      best = e.name;
    }
  }
  return best;
}

ModelSource source_from_catalog(const CatalogEntry& e) {
  ModelSource src;
  src.shape = e.shape();
  src.kind = "catalog";
  src.where = std::string(e.hf_repo);
  src.dtype = std::string(e.dtype);
  return src;
}

}  // namespace pagoda::ledger
