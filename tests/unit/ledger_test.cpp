// The memory ledger against hand calculations. Each catalog model's weight bytes and KV
// bytes per token are written out here from its published config.json (the numbers in the
// comments), never copied from the ledger's output; published parameter counts from the
// model cards are a second, independent check.
#include <gtest/gtest.h>

#include "shared_dir.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "ledger/memory.h"
#include "ledger/plan.h"
#include "ledger/sources.h"
#include "model/kv_storage.h"

namespace pagoda::ledger {
namespace {

const WeightType& type(const char* name) {
  static std::map<std::string, WeightType> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto t = parse_weight_type(name);
    EXPECT_TRUE(t.is_ok()) << name;
    it = cache.emplace(name, *t).first;
  }
  return it->second;
}

ModelShape catalog_shape(const char* name) {
  const CatalogEntry* e = find_in_catalog(name);
  EXPECT_NE(e, nullptr) << name;
  return e ? e->shape() : ModelShape{};
}

// Checks a catalog model: its own dtype's weight bytes and bf16 KV bytes per token.
void expect_model(const char* name, int64_t want_weight_bytes, int64_t want_kv_per_token) {
  const CatalogEntry* e = find_in_catalog(name);
  ASSERT_NE(e, nullptr) << name;
  const ModelShape s = e->shape();
  ASSERT_TRUE(validate(s).is_ok()) << validate(s).message();
  EXPECT_EQ(weight_bytes(s, type(std::string(e->dtype).c_str())), want_weight_bytes) << name;
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kBf16), want_kv_per_token) << name;
}

// ---- every catalog model, by hand --------------------------------------------------------

TEST(LedgerCatalog, Llama31_8B) {
  // meta-llama/Llama-3.1-8B-Instruct: 32 layers, hidden 4096, 32 heads, 8 KV heads of 128,
  // intermediate 14336, vocab 128256, untied.
  const int64_t L = 32, h = 4096, nh = 32, kv = 8, hd = 128, ffn = 14336, V = 128256;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h  // q, k, v, o
                        + 3 * h * ffn                                // gate, up, down
                        + 2 * h;                                     // two RMSNorms
  const int64_t params = V * h + L * layer + h + V * h;  // embedding, blocks, norm, lm_head
  EXPECT_NEAR(params / 1e9, 8.03, 0.005);                // model card: 8.03B
  expect_model("llama-3.1-8b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Llama31_70B) {
  // 80 layers, hidden 8192, 64 heads, 8 KV heads of 128, intermediate 28672, vocab 128256.
  const int64_t L = 80, h = 8192, nh = 64, kv = 8, hd = 128, ffn = 28672, V = 128256;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 3 * h * ffn + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 70.55, 0.01);
  expect_model("llama-3.1-70b", 2 * params, L * 2 * kv * hd * 2);
  // The seed's example: 2 x 80 x 8 x 128 x 2 = 327,680 bytes, 40 GiB at 128K.
  EXPECT_EQ(L * 2 * kv * hd * 2, 327680);
}

TEST(LedgerCatalog, Llama31_405B) {
  // 126 layers, hidden 16384, 128 heads, 8 KV heads of 128, intermediate 53248.
  const int64_t L = 126, h = 16384, nh = 128, kv = 8, hd = 128, ffn = 53248, V = 128256;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 3 * h * ffn + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 405.85, 0.05);
  expect_model("llama-3.1-405b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Llama32_1B) {
  // 16 layers, hidden 2048, 32 heads, 8 KV heads of 64, intermediate 8192, tied embeddings.
  const int64_t L = 16, h = 2048, nh = 32, kv = 8, hd = 64, ffn = 8192, V = 128256;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 3 * h * ffn + 2 * h;
  const int64_t params = V * h + L * layer + h;  // no separate lm_head
  EXPECT_NEAR(params / 1e9, 1.24, 0.005);
  expect_model("llama-3.2-1b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Qwen25_7B) {
  // Qwen/Qwen2.5-7B-Instruct: 28 layers, hidden 3584, 28 heads, 4 KV heads of 128,
  // intermediate 18944, vocab 152064, untied, biases on q, k and v.
  const int64_t L = 28, h = 3584, nh = 28, kv = 4, hd = 128, ffn = 18944, V = 152064;
  const int64_t layer =
      h * nh * hd + 2 * h * kv * hd + nh * hd * h + (nh * hd + 2 * kv * hd) + 3 * h * ffn + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 7.62, 0.005);  // model card: 7.61B
  expect_model("qwen2.5-7b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Qwen25_72B) {
  // 80 layers, hidden 8192, 64 heads, 8 KV heads of 128, intermediate 29568, vocab 152064.
  const int64_t L = 80, h = 8192, nh = 64, kv = 8, hd = 128, ffn = 29568, V = 152064;
  const int64_t layer =
      h * nh * hd + 2 * h * kv * hd + nh * hd * h + (nh * hd + 2 * kv * hd) + 3 * h * ffn + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 72.7, 0.05);
  expect_model("qwen2.5-72b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Qwen3_8B) {
  // Qwen/Qwen3-8B: 36 layers, hidden 4096, 32 heads, 8 KV heads, head_dim 128,
  // intermediate 12288, vocab 151936, untied, q_norm and k_norm (head_dim each).
  const int64_t L = 36, h = 4096, nh = 32, kv = 8, hd = 128, ffn = 12288, V = 151936;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 2 * hd + 3 * h * ffn + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 8.19, 0.01);  // model card: 8.2B
  expect_model("qwen3-8b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Qwen3_32B) {
  // 64 layers, hidden 5120, 64 heads, 8 KV heads of 128, intermediate 25600.
  const int64_t L = 64, h = 5120, nh = 64, kv = 8, hd = 128, ffn = 25600, V = 151936;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 2 * hd + 3 * h * ffn + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 32.76, 0.01);  // model card: 32.8B
  expect_model("qwen3-32b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Qwen3_235B_A22B) {
  // Qwen/Qwen3-235B-A22B: 94 layers, hidden 4096, 64 heads, 4 KV heads of 128, every layer
  // MoE with 128 experts of 1536 (8 active) and a 4096 x 128 router, vocab 151936.
  const int64_t L = 94, h = 4096, nh = 64, kv = 4, hd = 128, E = 128, eff = 1536, V = 151936;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 2 * hd  // attention
                        + E * h                                               // router
                        + E * 3 * h * eff                                     // experts
                        + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 235.1, 0.1);
  expect_model("qwen3-235b-a22b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Mistral7B) {
  // mistralai/Mistral-7B-Instruct-v0.3: 32 layers, hidden 4096, 32 heads, 8 KV heads of 128,
  // intermediate 14336, vocab 32768, untied.
  const int64_t L = 32, h = 4096, nh = 32, kv = 8, hd = 128, ffn = 14336, V = 32768;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 3 * h * ffn + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 7.25, 0.01);
  expect_model("mistral-7b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, Mixtral8x7B) {
  // mistralai/Mixtral-8x7B-Instruct-v0.1: 32 layers, hidden 4096, 32 heads, 8 KV heads,
  // 8 experts of 14336 (2 active), router 4096 x 8, vocab 32000.
  const int64_t L = 32, h = 4096, nh = 32, kv = 8, hd = 128, E = 8, eff = 14336, V = 32000;
  const int64_t layer =
      h * nh * hd + 2 * h * kv * hd + nh * hd * h + E * h + E * 3 * h * eff + 2 * h;
  const int64_t params = 2 * V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 46.7, 0.05);
  expect_model("mixtral-8x7b", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, DeepSeekV3) {
  // deepseek-ai/DeepSeek-V3: 61 layers (3 dense, 58 MoE), hidden 7168, 128 heads; MLA with
  // q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head_dim 128; dense
  // intermediate 18432; 256 routed experts + 1 shared of 2048; vocab 129280; untied.
  // The checkpoint is fp8: linear layers 1 byte, embeddings/norms/routers bf16.
  const int64_t L = 61, dense_layers = 3, h = 7168, nh = 128, qr = 1536, kvr = 512, nope = 128,
                rope = 64, vd = 128, ffn = 18432, E = 256, eff = 2048, V = 129280;
  const int64_t attn_linear = h * qr + qr * nh * (nope + rope)  // q_a, q_b
                              + h * (kvr + rope)                // kv_a (latent + rope key)
                              + kvr * nh * (nope + vd)          // kv_b
                              + nh * vd * h;                    // o
  const int64_t dense_ffn = 3 * h * ffn;
  const int64_t moe_ffn = E * 3 * h * eff + 1 * 3 * h * eff;  // routed + shared
  const int64_t linear = L * attn_linear + dense_layers * dense_ffn + (L - dense_layers) * moe_ffn;
  const int64_t other = 2 * V * h                            // embedding, lm_head
                        + L * (2 * h + qr + kvr) + h         // norms
                        + (L - dense_layers) * (E * h + E);  // router and its score bias
  EXPECT_NEAR((linear + other) / 1e9, 671.0, 0.1);           // model card: 671B (+14B MTP)
  // MLA: one latent of 512 + 64 values per layer, bf16.
  expect_model("deepseek-v3", linear * 1 + other * 2, L * (kvr + rope) * 2);
}

TEST(LedgerCatalog, Gemma3_27B) {
  // google/gemma-3-27b-it text_config: 62 layers, hidden 5376, 32 heads, 16 KV heads of 128,
  // intermediate 21504, vocab 262208, tied; 4 norms per layer plus q/k norms; sliding
  // window 1024 with pattern 6 (layers 5, 11, ..., 59 global: 10 full, 52 windowed).
  const int64_t L = 62, h = 5376, nh = 32, kv = 16, hd = 128, ffn = 21504, V = 262208;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 2 * hd + 3 * h * ffn + 4 * h;
  const int64_t params = V * h + L * layer + h;
  EXPECT_NEAR(params / 1e9, 27.0, 0.05);
  expect_model("gemma-3-27b", 2 * params, L * 2 * kv * hd * 2);
  const ModelShape s = catalog_shape("gemma-3-27b");
  const KvRate r = kv_rate(s, KvDtype::kBf16, 1, {0, L});
  EXPECT_EQ(r.full, 10 * 2 * kv * hd * 2);
  EXPECT_EQ(r.sliding, 52 * 2 * kv * hd * 2);
  EXPECT_EQ(r.window, 1024);
  // 128K tokens: full layers hold all 8192 blocks of 16, windowed ones the 65 blocks a
  // 1024-token window can touch.
  EXPECT_EQ(kv_bytes_per_sequence(r, 131072, 16),
            10 * 2 * kv * hd * 2 * 131072 + 52 * 2 * kv * hd * 2 * 65 * 16);
  // Inside the window every layer holds every (block-rounded) token.
  EXPECT_EQ(kv_bytes_per_sequence(r, 100, 16), L * 2 * kv * hd * 2 * 112);
}

TEST(LedgerCatalog, SmolLM2_135M) {
  // HuggingFaceTB/SmolLM2-135M-Instruct: 30 layers, hidden 576, 9 heads, 3 KV heads of 64,
  // intermediate 1536, vocab 49152, tied.
  const int64_t L = 30, h = 576, nh = 9, kv = 3, hd = 64, ffn = 1536, V = 49152;
  const int64_t layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 3 * h * ffn + 2 * h;
  const int64_t params = V * h + L * layer + h;
  EXPECT_NEAR(params / 1e6, 134.5, 0.1);
  expect_model("smollm2-135m", 2 * params, L * 2 * kv * hd * 2);
}

TEST(LedgerCatalog, NamesAreLowerCaseWithDashes) {
  EXPECT_GE(catalog().size(), 14u);
  for (const CatalogEntry& e : catalog()) {
    for (char c : e.name) EXPECT_TRUE(std::islower(c) || std::isdigit(c) || c == '-' || c == '.');
    EXPECT_TRUE(validate(e.shape()).is_ok()) << e.name;
  }
  EXPECT_NE(find_in_catalog("Llama-3.1-70B"), nullptr);
  EXPECT_EQ(find_in_catalog("llama-9"), nullptr);
  EXPECT_EQ(closest_catalog_name("llama-3.1-7b"), "llama-3.1-8b");
}

// ---- weight types ------------------------------------------------------------------------

TEST(LedgerWeights, TypesCountScalesAndKeepEmbeddingsAsStated) {
  const ModelShape s = catalog_shape("llama-3.1-8b");
  const int64_t L = 32, h = 4096, q = 32 * 128, kv = 8 * 128, ffn = 14336, V = 128256;
  // Linear layers as (rows, cols) with cols the input: q, k, v, o, gate, up, down.
  const int64_t linear = L * (h * q + 2 * h * kv + q * h + 3 * h * ffn);
  const int64_t vectors = L * 2 * h + h;
  // fp8: 1 byte per linear weight; embedding, lm_head, norms bf16.
  EXPECT_EQ(weight_bytes(s, type("fp8")), linear + 2 * (2 * V * h + vectors));
  // int8: plus one fp32 scale per output row of each linear layer.
  const int64_t rows = L * (q + 2 * kv + h + 2 * ffn + h);
  EXPECT_EQ(weight_bytes(s, type("int8")), linear + rows * 4 + 2 * (2 * V * h + vectors));
  // int4-g128: 4 bits plus an fp16 scale and a 4-bit zero per 128 weights = 66.5 bytes.
  EXPECT_EQ(weight_bytes(s, type("int4-g128")), linear / 128 * 133 / 2 + 2 * (2 * V * h + vectors));
  // nf4: 64 weights in 32 bytes plus an fp32 absmax.
  EXPECT_EQ(weight_bytes(s, type("nf4")), linear / 64 * 36 + 2 * (2 * V * h + vectors));
  // GGUF types quantize embeddings and output too; norms stay f32.
  EXPECT_EQ(weight_bytes(s, type("q4_0")), (linear + 2 * V * h) / 32 * 18 + 4 * vectors);
  EXPECT_EQ(weight_bytes(s, type("q8_0")), (linear + 2 * V * h) / 32 * 34 + 4 * vectors);
  EXPECT_EQ(weight_bytes(s, type("q4_k")), (linear + 2 * V * h) / 256 * 144 + 4 * vectors);
  EXPECT_EQ(weight_bytes(s, type("q6_k")), (linear + 2 * V * h) / 256 * 210 + 4 * vectors);
  EXPECT_EQ(weight_bytes(s, type("fp32")), 4 * weight_params(s));
  EXPECT_EQ(weight_bytes(s, type("fp16")), 2 * weight_params(s));
}

TEST(LedgerWeights, RowsArePaddedToWholeBlocks) {
  // SmolLM2's 576-wide rows hold 2.25 blocks of 256: q4_k stores 3 blocks per row.
  WeightPart p{"ffn", WeightRole::kLinear, 1536, 576, 1};
  EXPECT_EQ(part_bytes(p, type("q4_k")), 1536 * 3 * 144);
  // The 1536-wide down projection is 6 whole blocks.
  WeightPart d{"ffn", WeightRole::kLinear, 576, 1536, 1};
  EXPECT_EQ(part_bytes(d, type("q4_k")), 576 * 6 * 144);
}

TEST(LedgerWeights, RejectsUnknownTypes) {
  auto t = parse_weight_type("int3");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("int4-g128"), std::string::npos);
  EXPECT_FALSE(parse_kv_dtype("fp4").is_ok());
  EXPECT_EQ(*parse_weight_type("Q4_K"), *parse_weight_type("q4_k"));
}

// ---- KV types, tensor and pipeline parallelism -------------------------------------------

TEST(LedgerKv, ElementTypes) {
  const ModelShape s = catalog_shape("llama-3.1-70b");
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kFp16), 80 * 2 * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kFp8), 80 * 2 * 8 * 128 * 1);
  // q8_0 / q4_0 layout: 128 values are 4 blocks of 34 / 18 bytes.
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kInt8), 80 * 2 * 8 * 4 * 34);
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kInt4), 80 * 2 * 8 * 4 * 18);
  // MLA's 576-value latent is 18 blocks.
  const ModelShape ds = catalog_shape("deepseek-v3");
  EXPECT_EQ(kv_bytes_per_token(ds, KvDtype::kInt8), 61 * 18 * 34);
  EXPECT_EQ(kv_bytes_per_token(ds, KvDtype::kFp8), 61 * 576);
}

TEST(LedgerKv, TensorParallelSplitsAndReplicatesKvHeads) {
  const ModelShape s = catalog_shape("llama-3.1-70b");  // 8 KV heads
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kBf16, 2), 80 * 2 * 4 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kBf16, 8), 80 * 2 * 1 * 128 * 2);
  // 16 ranks, 8 heads: each rank still holds one whole head (two ranks per head).
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kBf16, 16), 80 * 2 * 1 * 128 * 2);
  EXPECT_TRUE(check_parallel(s, 16, 1).is_ok());
  EXPECT_FALSE(check_parallel(s, 3, 1).is_ok());          // 64 heads are not divisible by 3
  const ModelShape q = catalog_shape("qwen3-235b-a22b");  // 4 KV heads
  EXPECT_EQ(kv_bytes_per_token(q, KvDtype::kBf16, 8), 94 * 2 * 1 * 128 * 2);
  // MLA: the latent is replicated on every rank.
  const ModelShape ds = catalog_shape("deepseek-v3");
  EXPECT_EQ(kv_bytes_per_token(ds, KvDtype::kBf16, 8), 61 * 576 * 2);
  // Weights: attention and FFN split, norms replicated.
  const int64_t h = 8192, V = 128256;
  const int64_t per_rank = 2 * (V / 8 * h * 2                                    // embd, head
                                + 80 * (h * 8 * 128 + 2 * h * 128 + 8 * 128 * h  // q k v o
                                        + 3 * h * (28672 / 8) + 2 * h) +
                                h);
  EXPECT_EQ(weight_bytes(s, type("bf16"), 8), per_rank);
}

TEST(LedgerKv, PipelineStagesSplitLayers) {
  // vLLM's split: the remainder goes to the stages before the last.
  auto st = pipeline_stages(80, 3);
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].size(), 27);
  EXPECT_EQ(st[1].size(), 27);
  EXPECT_EQ(st[2].size(), 26);
  EXPECT_EQ(st[2].end, 80);
  st = pipeline_stages(61, 4);
  EXPECT_EQ(st[0].size(), 15);
  EXPECT_EQ(st[2].size(), 16);
  EXPECT_EQ(st[3].size(), 15);
  EXPECT_FALSE(check_parallel(catalog_shape("smollm2-135m"), 1, 31).is_ok());

  const ModelShape s = catalog_shape("llama-3.1-70b");
  const int64_t h = 8192, V = 128256, layer = 2 * h * 8192 + 2 * h * 1024 + 3 * h * 28672 + 2 * h;
  const WeightType& bf16 = type("bf16");
  EXPECT_EQ(stage_weight_bytes(s, bf16, 1, {0, 40}, true, false), 2 * (V * h + 40 * layer));
  EXPECT_EQ(stage_weight_bytes(s, bf16, 1, {40, 80}, false, true), 2 * (40 * layer + h + V * h));
  EXPECT_EQ(kv_rate(s, KvDtype::kBf16, 1, {40, 80}).total(), 40 * 2 * 8 * 128 * 2);
  // Tied embeddings: the last stage holds its own copy of the table.
  const ModelShape t = catalog_shape("llama-3.2-1b");
  const int64_t th = 2048, tlayer = 2 * th * 2048 + 2 * th * 512 + 3 * th * 8192 + 2 * th;
  EXPECT_EQ(stage_weight_bytes(t, bf16, 1, {8, 16}, false, true),
            2 * (8 * tlayer + th + 128256 * th));
}

TEST(LedgerKv, PoolBlocksAndSequences) {
  const ModelShape s = catalog_shape("llama-3.1-8b");
  const int64_t per_token = 32 * 2 * 8 * 128 * 2;
  EXPECT_EQ(kv_pool_blocks(s, KvDtype::kBf16, int64_t{10} << 30, 16),
            (int64_t{10} << 30) / (16 * per_token));
  EXPECT_EQ(kv_pool_blocks(s, KvDtype::kBf16, -5, 16), 0);
  const KvRate r = kv_rate(s, KvDtype::kBf16, 1, {0, 32});
  EXPECT_EQ(kv_bytes_per_sequence(r, 1, 16), 16 * per_token);  // a block is the unit
  EXPECT_EQ(kv_bytes_per_sequence(r, 17, 16), 32 * per_token);
  EXPECT_EQ(kv_bytes_per_sequence(r, 0, 16), 0);
  EXPECT_EQ(mha_equivalent_kv_bytes_per_token(s, KvDtype::kBf16), 32 * 32 * 256 * 2);
}

// The engine's KvStorage allocates exactly what the ledger predicts.
TEST(LedgerKv, KvStorageMatchesTheLedger) {
  struct Case {
    int layers, dim, heads, kv_heads, head_dim;
  };
  for (const Case& cs : {Case{5, 64, 8, 4, 8}, Case{30, 576, 9, 3, 64}, Case{2, 256, 4, 1, 64},
                         Case{3, 512, 8, 8, 64}}) {
    ModelConfig c;
    c.n_layers = cs.layers;
    c.dim = cs.dim;
    c.n_heads = cs.heads;
    c.n_kv_heads = cs.kv_heads;
    c.head_dim = cs.head_dim;
    c.ffn_dim = 4 * cs.dim;
    c.n_vocab = 100;
    const ModelShape s = shape_from_config(c);
    ASSERT_TRUE(validate(s).is_ok());
    const int64_t per_token = kv_bytes_per_token(s, KvDtype::kFp16);
    EXPECT_EQ(static_cast<int64_t>(KvStorage::bytes_per_token(c)), per_token);
    const int64_t budget = 3 * 1000 * 1000 + 12345;
    const int64_t blocks = kv_pool_blocks(s, KvDtype::kFp16, budget, 16);
    KvStorage kv(c, static_cast<int>(blocks), 16);
    EXPECT_EQ(static_cast<int64_t>(kv.bytes()), blocks * 16 * per_token);
    EXPECT_LE(static_cast<int64_t>(kv.bytes()), budget);
    EXPECT_GT(static_cast<int64_t>(kv.bytes()) + 16 * per_token, budget);
    // The 8-bit pool is the ledger's int8 (q8_0) KV type.
    if (!KvStorage::supports_q8(c)) continue;
    const int64_t per_token8 = kv_bytes_per_token(s, KvDtype::kInt8);
    EXPECT_EQ(static_cast<int64_t>(KvStorage::bytes_per_token(c, true)), per_token8);
    const int64_t blocks8 = kv_pool_blocks(s, KvDtype::kInt8, budget, 16);
    KvStorage kv8(c, static_cast<int>(blocks8), 16, true);
    EXPECT_EQ(static_cast<int64_t>(kv8.bytes()), blocks8 * 16 * per_token8);
    EXPECT_LE(static_cast<int64_t>(kv8.bytes()), budget);
    EXPECT_GT(blocks8, blocks * 17 / 10);  // 64 bytes per 32 values against 34
  }
}

// ---- config.json -------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("pagoda_ledger_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

constexpr const char* kLlama8B = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "attention_bias": false})";

TEST(LedgerConfigJson, LlamaMatchesTheCatalog) {
  auto src = source_from_hf_config(kLlama8B, "config.json");
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  const ModelShape& s = src->shape;
  EXPECT_EQ(s.head_dim, 4096 / 32);
  EXPECT_EQ(src->dtype, "bf16");
  const ModelShape c = catalog_shape("llama-3.1-8b");
  EXPECT_EQ(weight_bytes(s, type("bf16")), weight_bytes(c, type("bf16")));
  EXPECT_EQ(kv_bytes_per_token(s, KvDtype::kBf16), 32 * 2 * 8 * 128 * 2);
}

TEST(LedgerConfigJson, DeepSeekMoeAndMla) {
  const char* cfg = R"({"model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
    "tie_word_embeddings": false, "topk_method": "noaux_tc", "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
  auto src = source_from_hf_config(cfg, "ds.json");
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  EXPECT_EQ(src->dtype, "fp8");
  EXPECT_TRUE(src->shape.is_mla());
  EXPECT_EQ(kv_bytes_per_token(src->shape, KvDtype::kBf16), 61 * (512 + 64) * 2);
  const ModelShape c = catalog_shape("deepseek-v3");
  EXPECT_EQ(weight_bytes(src->shape, type("fp8")), weight_bytes(c, type("fp8")));
  EXPECT_FALSE(src->shape.layer_is_moe(2));
  EXPECT_TRUE(src->shape.layer_is_moe(3));
}

TEST(LedgerConfigJson, QwenMoeSparseStepAndMlpOnlyLayers) {
  const char* cfg = R"({"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 512,
    "moe_intermediate_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2,
    "decoder_sparse_step": 2, "mlp_only_layers": [3], "vocab_size": 1000,
    "tie_word_embeddings": true})";
  auto src = source_from_hf_config(cfg, "q.json");
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  const ModelShape& s = src->shape;
  // MoE where (layer + 1) % 2 == 0 and not listed as MLP-only: layers 1 and 5.
  for (int l = 0; l < 6; ++l) EXPECT_EQ(s.layer_is_moe(l), l == 1 || l == 5) << l;
  const int64_t h = 256, attn = h * 256 + 2 * h * 128 + 256 * h + 2 * 64;
  const int64_t dense = 3 * h * 512, moe = 8 * h + 8 * 3 * h * 64;
  EXPECT_EQ(weight_params(s), 1000 * h + 6 * (attn + 2 * h) + 4 * dense + 2 * moe + h);
}

TEST(LedgerConfigJson, GemmaTextConfigAndSlidingPattern) {
  const char* cfg = R"({"architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3", "torch_dtype": "bfloat16",
    "text_config": {"model_type": "gemma3_text", "hidden_size": 5376,
      "intermediate_size": 21504, "num_hidden_layers": 62, "num_attention_heads": 32,
      "num_key_value_heads": 16, "head_dim": 128, "sliding_window": 1024,
      "sliding_window_pattern": 6, "vocab_size": 262208, "max_position_embeddings": 131072},
    "vision_config": {"hidden_size": 1152}})";
  auto src = source_from_hf_config(cfg, "g.json");
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  const ModelShape& s = src->shape;
  EXPECT_TRUE(s.tied_embeddings);  // Gemma's default, noted
  EXPECT_EQ(s.n_sliding_layers(), 52);
  EXPECT_EQ(s.attention(5), LayerAttention::kFull);
  EXPECT_EQ(s.attention(6), LayerAttention::kSliding);
  const ModelShape c = catalog_shape("gemma-3-27b");
  EXPECT_EQ(weight_bytes(s, type("bf16")), weight_bytes(c, type("bf16")));
  EXPECT_FALSE(src->notes.empty());
}

TEST(LedgerConfigJson, MistralWindowAndLayerTypes) {
  // Mistral-7B-v0.1: every layer has a 4096-token window.
  const char* v01 = R"({"model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "sliding_window": 4096, "vocab_size": 32000,
    "max_position_embeddings": 32768, "tie_word_embeddings": false})";
  auto src = source_from_hf_config(v01, "m.json");
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  const KvRate r = kv_rate(src->shape, KvDtype::kBf16, 1, {0, 32});
  EXPECT_EQ(r.full, 0);
  EXPECT_EQ(kv_bytes_per_sequence(r, 32768, 16), 32 * 2 * 8 * 128 * 2 * (257 * 16));
  // layer_types: a hybrid with a linear-attention layer holds no KV there.
  const char* hybrid = R"({"model_type": "x", "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
    "vocab_size": 50, "tie_word_embeddings": true, "sliding_window": 32,
    "layer_types": ["full_attention", "linear_attention", "sliding_attention"]})";
  auto hy = source_from_hf_config(hybrid, "h.json");
  ASSERT_TRUE(hy.is_ok()) << hy.status().message();
  const KvRate hr = kv_rate(hy->shape, KvDtype::kBf16, 1, {0, 3});
  EXPECT_EQ(hr.full, 2 * 1 * 64 * 2);
  EXPECT_EQ(hr.sliding, 2 * 1 * 64 * 2);
  EXPECT_EQ(hr.window, 32);
}

TEST(LedgerConfigJson, ErrorsNameTheProblem) {
  auto bad = source_from_hf_config("{not json", "a.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("a.json"), std::string::npos);
  auto missing = source_from_hf_config(R"({"hidden_size": 64})", "b.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("num_hidden_layers"), std::string::npos);
  auto negative = source_from_hf_config(
      R"({"num_hidden_layers": -1, "hidden_size": 64, "num_attention_heads": 2,
          "vocab_size": 5})",
      "c.json");
  EXPECT_FALSE(negative.is_ok());
  auto heads = source_from_hf_config(
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "num_key_value_heads": 3, "intermediate_size": 8, "vocab_size": 5})",
      "d.json");
  ASSERT_FALSE(heads.is_ok());
  EXPECT_NE(heads.status().message().find("KV heads"), std::string::npos);
}

TEST(LedgerConfigJson, OddlyTypedKeysAreNotFatal) {
  // Keys of an unexpected type read as absent (or are refused), never an exception.
  const char* cfg = R"({"model_type": 7, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 10,
    "tie_word_embeddings": "yes", "torch_dtype": 16, "architectures": "Llama",
    "quantization_config": {"quant_method": ["awq"], "bits": "4", "load_in_4bit": 1},
    "text_config": {"model_type": null}, "layer_types": "full"})";
  auto src = source_from_hf_config(cfg, "odd.json");
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  EXPECT_EQ(src->dtype, "bf16");
  auto bad = source_from_hf_config(R"({"num_hidden_layers": 2.5, "hidden_size": 64,
    "num_attention_heads": 2, "vocab_size": 10})",
                                   "float.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("num_hidden_layers"), std::string::npos);
}

TEST(LedgerConfigJson, FoldersUseTheCheckpointSize) {
  TempDir dir;
  dir.write("config.json", kLlama8B);
  dir.write("model.safetensors.index.json",
            R"({"metadata": {"total_size": 16060522496}, "weight_map": {}})");
  auto src = resolve_model(dir.path());
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  EXPECT_EQ(src->checkpoint_bytes, 16060522496);
  EXPECT_EQ(src->kind, "checkpoint");

  // A single model.safetensors: the end of its last tensor's data.
  TempDir one;
  one.write("config.json", kLlama8B);
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "BF16", "shape": [2, 3],)"
      R"( "data_offsets": [0, 12]}, "b": {"dtype": "F32", "shape": [5], "data_offsets": [12, 32]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[static_cast<size_t>(i)] = static_cast<char>(header.size() >> (8 * i));
  file += header + std::string(32, '\0');
  one.write("model.safetensors", file);
  auto single = resolve_model(one.path());
  ASSERT_TRUE(single.is_ok()) << single.status().message();
  EXPECT_EQ(single->checkpoint_bytes, 32);

  TempDir empty;
  auto none = resolve_model(empty.path());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("config.json"), std::string::npos);
  auto unknown = resolve_model("llama-3.1-7b");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("llama-3.1-8b"), std::string::npos);
}

// ---- GGUF ----------------------------------------------------------------------------------

TEST(LedgerGguf, WeightsAreTheFilesTensorBytes) {
  const std::string path = test::shared_dir() + "/models/stories260K.gguf";
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto src = source_from_gguf(**f);
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  int64_t total = 0;
  for (const GgufTensorInfo& t : (*f)->tensors()) total += static_cast<int64_t>(t.size);
  PlanInput in;
  in.shape = src->shape;
  in.tensors = src->tensors;
  in.exact_weights = true;
  in.weight_type = *parse_weight_type(src->dtype);
  in.context = 256;
  in.device = {"cpu", int64_t{1} << 30, false};
  auto plan = make_plan(in);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->weight_bytes, total);
  // The engine's own view: shape_from_config of the same file.
  EXPECT_EQ(plan->kv_bytes_per_token,
            src->shape.n_layers * 2 * src->shape.n_kv_heads * src->shape.head_dim * 2);
  // Two stages hold every tensor once between them (plus the tied table's copy).
  in.pp = 2;
  auto two = make_plan(in, false);
  ASSERT_TRUE(two.is_ok()) << two.status().message();
  const int64_t embd = static_cast<int64_t>((*f)->find_tensor("token_embd.weight")->size);
  const bool tied = (*f)->find_tensor("output.weight") == nullptr;
  int64_t replicated = 0;  // rope_freqs and such sit on every stage
  for (const SourceTensor& t : src->tensors)
    if (t.place == TensorPlace::kEveryStage) replicated += t.bytes;
  EXPECT_EQ(two->stages[0].weight_bytes + two->stages[1].weight_bytes,
            total + (tied ? embd : 0) + replicated);
}

// ---- the plan ------------------------------------------------------------------------------

PlanInput catalog_input(const char* name, int64_t context) {
  const CatalogEntry* e = find_in_catalog(name);
  PlanInput in;
  in.shape = e->shape();
  in.weight_type = *parse_weight_type(e->dtype);
  in.context = context;
  in.device = *parse_device("H100-80G", true);
  return in;
}

TEST(LedgerPlan, TheSeedExample) {
  auto p = make_plan(catalog_input("llama-3.1-70b", 131072));
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->kv_bytes_per_token, 327680);
  EXPECT_EQ(p->kv_bytes_per_sequence, int64_t{40} << 30);              // 327,680 x 131,072 = 40 GiB
  EXPECT_EQ(p->mha_equivalent_kv_bytes_per_token, 2 * 80 * 8192 * 2);  // 2.5 MiB
  EXPECT_FALSE(p->fits);                                               // 141 GB of bf16 weights
  EXPECT_GT(p->shortfall_bytes, 0);
  bool tp = false;
  for (const Suggestion& s : p->suggestions) {
    tp = tp || s.flags.find("--tensor-parallel-size") != std::string::npos;
    EXPECT_GE(s.max_concurrent_sequences, 1) << s.flags;
  }
  EXPECT_TRUE(tp);
}

TEST(LedgerPlan, PoolIsWhatIsLeftAndSequencesFollow) {
  PlanInput in = catalog_input("llama-3.1-8b", 32768);
  in.concurrency = 4;
  auto p = make_plan(in);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const int64_t budget = static_cast<int64_t>(81559.0 * 1048576 * 0.9);
  EXPECT_EQ(p->budget_bytes, budget);
  EXPECT_EQ(p->kv_pool_bytes, budget - p->weight_bytes - p->overheads.total());
  EXPECT_EQ(p->overheads.runtime, kGpuRuntimeBytes);
  EXPECT_EQ(p->overheads.logits, 256 * 128256 * 4 * 2);
  const int64_t per_seq = int64_t{131072} * 32768;
  EXPECT_EQ(p->kv_bytes_per_sequence, per_seq);
  EXPECT_EQ(p->max_concurrent_sequences, p->kv_pool_bytes / per_seq);
  EXPECT_EQ(p->max_context_tokens,
            std::min<int64_t>(131072, p->kv_pool_bytes / 4 / 131072 / 16 * 16));
  EXPECT_EQ(p->fits, p->max_concurrent_sequences >= 4);
  EXPECT_EQ(p->kv_pool_blocks, p->kv_pool_bytes / (16 * 131072));

  // A fixed KV pool: what the engine's --kv-cache-memory does.
  in.kv_cache_memory = int64_t{4} << 30;
  auto fixed = make_plan(in);
  ASSERT_TRUE(fixed.is_ok());
  EXPECT_EQ(fixed->kv_pool_bytes, int64_t{4} << 30);
  EXPECT_EQ(fixed->kv_pool_blocks,
            kv_pool_blocks(in.shape, KvDtype::kBf16, int64_t{4} << 30, in.block_size));
}

TEST(LedgerPlan, SuggestionsAreComputed) {
  // 8B at 128K on a 24 GB card with 8 sequences: does not fit as is.
  PlanInput in = catalog_input("llama-3.1-8b", 131072);
  in.device = *parse_device("RTX4090-24G", true);
  in.concurrency = 8;
  in.max_num_batched_tokens = 2048;
  auto p = make_plan(in);
  ASSERT_TRUE(p.is_ok());
  ASSERT_FALSE(p->fits);
  ASSERT_FALSE(p->suggestions.empty());
  for (const Suggestion& s : p->suggestions) {
    // Re-planning with each suggestion fits.
    PlanInput m = in;
    std::istringstream words(s.flags);
    std::string flag, value;
    while (words >> flag >> value) {
      if (flag == "--tensor-parallel-size") m.tp = std::stoi(value);
      if (flag == "--kv-cache-dtype") m.kv_dtype = *parse_kv_dtype(value);
      if (flag == "--context") m.context = std::stoll(value);
      if (flag == "--concurrency") m.concurrency = std::stoll(value);
      if (flag == "--dtype") m.weight_type = *parse_weight_type(value);
    }
    auto again = make_plan(m, false);
    ASSERT_TRUE(again.is_ok());
    EXPECT_TRUE(again->fits) << s.flags;
  }
}

TEST(LedgerPlan, Fp8WeightsCountTheirActivationScratch) {
  // Llama-3.1-8B: hidden 4096, q 4096, k and v 1024 each, FFN 14336. The CUDA backend's
  // FP8 scratch (Gemm::reserve_fp8) holds the batch's activations in one byte at the widest
  // input (the FFN's 14336), then a 16-token fp32 tile at the widest output (gate and up,
  // 2 x 14336).
  PlanInput in = catalog_input("llama-3.1-8b", 8192);
  in.weight_type = type("fp8");
  in.max_num_batched_tokens = 8192;
  auto p = make_plan(in);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const int64_t x8 = int64_t{8192} * 14336, tile = 16 * 28672 * 4;
  EXPECT_EQ(p->overheads.fp8_activations, x8 + tile);
  EXPECT_EQ(p->overheads.total(),
            p->overheads.activations + x8 + tile + p->overheads.logits + p->overheads.runtime);
  EXPECT_EQ(p->kv_pool_bytes, p->budget_bytes - p->weight_bytes - p->overheads.total());

  // Tokens are rounded up to 16: 8190 hold as much as 8192.
  in.max_num_batched_tokens = 8190;
  EXPECT_EQ(make_plan(in)->overheads.fp8_activations, x8 + tile);
  // 33 tokens: 48 rows of 14336 bytes (a multiple of 16 already).
  in.max_num_batched_tokens = 33;
  EXPECT_EQ(make_plan(in)->overheads.fp8_activations, 48 * 14336 + tile);

  // Without fp8 weights, or on the CPU (which has no FP8 products), there is none.
  in.weight_type = type("bf16");
  EXPECT_EQ(make_plan(in)->overheads.fp8_activations, 0);
  in.weight_type = type("int4-g128");
  EXPECT_EQ(make_plan(in)->overheads.fp8_activations, 0);
  in.weight_type = type("fp8");
  in.device = {"cpu", int64_t{64} << 30, false};
  EXPECT_EQ(make_plan(in)->overheads.fp8_activations, 0);
}

TEST(LedgerPlan, NoSmallerKvTypeIsSuggestedForTheCpu) {
  // 8 sequences of 32K tokens of Llama-3.1-8B need 32 GiB of bf16 KV; 48 GiB x 0.9 less
  // 15 GiB of weights leaves room for 6. FP8 KV (16 GiB) would fit, but only on a GPU: the
  // CPU backend stores fp16 alone.
  PlanInput in = catalog_input("llama-3.1-8b", 32768);
  in.concurrency = 8;
  in.device = *parse_device("48GiB", true);
  auto gpu = make_plan(in);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  ASSERT_FALSE(gpu->fits);
  bool fp8 = false;
  for (const Suggestion& s : gpu->suggestions)
    fp8 = fp8 || s.flags.find("--kv-cache-dtype fp8") != std::string::npos;
  EXPECT_TRUE(fp8);

  in.device = *parse_device("48GiB", false);
  in.kv_dtype = KvDtype::kFp16;  // what `pagoda plan --device cpu` plans by default
  auto cpu = make_plan(in);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  ASSERT_FALSE(cpu->fits);
  EXPECT_FALSE(cpu->suggestions.empty());  // a shorter context, fewer sequences
  // The CPU's KV types are fp16 and int8 (q8_0): int8 may be offered, fp8 and int4 never.
  const auto cpu_kv_ok = [](const std::string& f) {
    return f.find("--kv-cache-dtype fp8") == std::string::npos &&
           f.find("--kv-cache-dtype int4") == std::string::npos;
  };
  for (const Suggestion& s : cpu->suggestions) EXPECT_TRUE(cpu_kv_ok(s.flags)) << s.flags;

  // Nothing fits alone on a small machine: the combined search leaves the KV type alone too
  // (it offered int4-g128 weights with fp8 KV here).
  in.device = *parse_device("12GiB", false);
  in.concurrency = 2;
  auto small = make_plan(in);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  for (const Suggestion& s : small->suggestions) EXPECT_TRUE(cpu_kv_ok(s.flags)) << s.flags;
}

TEST(LedgerPlan, CpuWeightSuggestionsAreGgufTypes) {
  // A catalog model (bf16 safetensors) that does not fit: a GPU is offered fp8 / int4-g128
  // weights, the CPU (which has kernels for neither) GGUF types.
  PlanInput in = catalog_input("llama-3.1-8b", 8192);
  in.concurrency = 1;
  auto weights_offered = [&](const char* device, bool gpu) {
    in.device = *parse_device(device, gpu);
    if (!gpu) in.kv_dtype = KvDtype::kFp16;
    auto p = make_plan(in);
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    std::string all;
    if (p.is_ok()) {
      EXPECT_FALSE(p->fits) << device;
      for (const Suggestion& s : p->suggestions) all += s.flags + "; ";
    }
    return all;
  };
  const std::string gpu = weights_offered("12GiB", true);
  EXPECT_NE(gpu.find("--dtype fp8"), std::string::npos) << gpu;
  const std::string cpu = weights_offered("12GiB", false);
  EXPECT_EQ(cpu.find("--dtype fp8"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find("int4-g128"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("--dtype q"), std::string::npos) << cpu;  // q8_0 here: it fits
}

TEST(LedgerPlan, DevicesAndSizes) {
  EXPECT_EQ(*parse_bytes("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(*parse_bytes("141GB"), int64_t{141} * 1000 * 1000 * 1000);
  EXPECT_EQ(*parse_bytes("512 MiB"), int64_t{512} << 20);
  EXPECT_EQ(*parse_bytes("1.5T"), int64_t{3} << 39);
  EXPECT_EQ(*parse_bytes("123456"), 123456);
  EXPECT_FALSE(parse_bytes("eighty").is_ok());
  EXPECT_FALSE(parse_bytes("80 GiBs").is_ok());
  EXPECT_EQ(parse_device("h200-141g", true)->memory_bytes, int64_t{143771} << 20);
  EXPECT_EQ(parse_device("A100-40G", true)->memory_bytes, int64_t{40960} << 20);
  auto bad = parse_device("H300", true);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("H100-80G"), std::string::npos);
}

TEST(LedgerPlan, PipelineBottleneckAndCpu) {
  PlanInput in = catalog_input("llama-3.1-70b", 8192);
  in.pp = 2;
  in.tp = 2;
  auto p = make_plan(in);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  ASSERT_EQ(p->stages.size(), 2u);
  EXPECT_EQ(p->kv_bytes_per_token, 40 * 2 * 4 * 128 * 2);
  for (const StagePlan& st : p->stages)
    EXPECT_GE(st.max_concurrent_sequences, p->max_concurrent_sequences);
  // CPU: fp32 activations in Pagoda's workspace layout, one logits copy.
  PlanInput cpu = catalog_input("smollm2-135m", 2048);
  cpu.device = {"cpu", int64_t{8} << 30, false};
  cpu.max_num_batched_tokens = 512;
  cpu.max_num_seqs = 4;
  auto c = make_plan(cpu);
  ASSERT_TRUE(c.is_ok());
  const int64_t h = 576, q = 576, kv = 192, ffn = 1536, rope = 64;
  EXPECT_EQ(c->overheads.activations, 512 * (4 * h + q + 2 * kv + q + 3 * ffn + rope) * 4);
  EXPECT_EQ(c->overheads.logits, 4 * 49152 * 4);
  EXPECT_EQ(c->overheads.runtime, kCpuRuntimeBaseBytes + kCpuRuntimeBytesPerVocab * 49152);
}

}  // namespace
}  // namespace pagoda::ledger
