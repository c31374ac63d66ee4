// How the engine sizes a GPU's KV pool by KV cache type (plan_gpu_kv_pool, pure
// arithmetic: no GPU needed), with the bytes per token worked out here from the model
// file's own metadata: layers x KV heads x head size x 2 (K and V) x bytes per element.
#include <gtest/gtest.h>

#include "../unit/shared_dir.h"

#include <algorithm>

#include "engine/kv_budget.h"
#include "model/gguf.h"

namespace pagoda {
namespace {

const std::string kModel = test::shared_dir() + "/models/stories260K.gguf";

TEST(KvBudget, AnFp8PoolHoldsTwiceTheTokensOfAnFp16One) {
  auto f = open_tensor_source(kModel);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const int64_t layers = *(*f)->gguf()->get_int("llama.block_count");
  const int64_t heads = *(*f)->gguf()->get_int("llama.attention.head_count");
  const int64_t kv_heads = *(*f)->gguf()->get_int("llama.attention.head_count_kv");
  const int64_t head_dim = *(*f)->gguf()->get_int("llama.embedding_length") / heads;
  const int64_t elems_per_token = layers * kv_heads * head_dim * 2;

  EngineConfig c;
  c.device = "cuda";
  c.block_size = 16;
  c.max_model_len = 256;
  c.kv_cache_memory = int64_t{64} << 20;  // the pool is exactly this
  const int64_t gpu = int64_t{80} << 30;
  auto fp16 = plan_gpu_kv_pool(**f, 512, c, gpu, gpu);
  ASSERT_TRUE(fp16.is_ok()) << fp16.status().message();
  c.kv_cache_dtype = "fp8";
  auto fp8 = plan_gpu_kv_pool(**f, 512, c, gpu, gpu);
  ASSERT_TRUE(fp8.is_ok()) << fp8.status().message();

  EXPECT_EQ(fp16->kv.n_blocks, c.kv_cache_memory / (16 * elems_per_token * 2));
  EXPECT_EQ(fp8->kv.n_blocks, c.kv_cache_memory / (16 * elems_per_token));
  EXPECT_EQ(fp16->kv.pool_bytes, int64_t{fp16->kv.n_blocks} * 16 * elems_per_token * 2);
  EXPECT_EQ(fp8->kv.pool_bytes, int64_t{fp8->kv.n_blocks} * 16 * elems_per_token);
  EXPECT_EQ(fp16->weight_bytes, fp8->weight_bytes);  // only the cache changes
  // The parsed type travels with the budget, for the runner.
  EXPECT_EQ(fp16->kv_cache_type, KvCacheType::k16Bit);
  EXPECT_EQ(fp8->kv_cache_type, KvCacheType::kFp8);
  EXPECT_FALSE(fp8->fp8_weights);
}

TEST(KvBudget, Fp8WeightsLeaveRoomForTheirActivationScratch) {
  // What CudaModel::reserve asks Gemm::reserve_fp8 for: the batch's tokens (rounded up to
  // 16) x the widest input in one byte, 16-byte aligned, and a 16-row fp32 tile of the
  // widest output, from the file's own metadata.
  auto f = open_tensor_source(kModel);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const int64_t dim = *(*f)->gguf()->get_int("llama.embedding_length");
  const int64_t heads = *(*f)->gguf()->get_int("llama.attention.head_count");
  const int64_t kv_dim = *(*f)->gguf()->get_int("llama.attention.head_count_kv") * (dim / heads);
  const int64_t ffn = *(*f)->gguf()->get_int("llama.feed_forward_length");

  EngineConfig c;
  c.device = "cuda";
  c.max_model_len = 256;
  c.max_num_batched_tokens = 1000;
  c.kv_cache_memory = int64_t{64} << 20;
  const int64_t gpu = int64_t{80} << 30;
  auto none = plan_gpu_kv_pool(**f, 512, c, gpu, gpu);
  ASSERT_TRUE(none.is_ok()) << none.status().message();
  c.quantization = "fp8";
  auto fp8 = plan_gpu_kv_pool(**f, 512, c, gpu, gpu);
  ASSERT_TRUE(fp8.is_ok()) << fp8.status().message();
  const int64_t cols = std::max(dim, ffn), rows = std::max({dim + 2 * kv_dim, 2 * ffn, dim});
  const int64_t x8 = (1008 * cols + 15) / 16 * 16;
  EXPECT_EQ(fp8->overhead_bytes - none->overhead_bytes, x8 + 16 * rows * 4);
  EXPECT_FALSE(none->fp8_weights);
  EXPECT_TRUE(fp8->fp8_weights);
  EXPECT_EQ(fp8->kv_cache_type, KvCacheType::k16Bit);
}

TEST(KvBudget, KvCacheTypesByBackend) {
  EngineConfig c;
  for (const char* name : {"auto", "fp16", "f16", "float16"}) {
    c.kv_cache_dtype = name;
    EXPECT_EQ(*kv_cache_type(c, false), KvCacheType::k16Bit) << name;
    EXPECT_EQ(*kv_cache_type(c, true), KvCacheType::k16Bit) << name;
  }
  for (const char* name : {"fp8", "fp8_e4m3"}) {
    c.kv_cache_dtype = name;
    EXPECT_EQ(*kv_cache_type(c, true), KvCacheType::kFp8) << name;
    const auto cpu = kv_cache_type(c, false);
    ASSERT_FALSE(cpu.is_ok()) << name;
    EXPECT_EQ(cpu.status().code(), StatusCode::kUnsupported) << name;
  }
  // The CPU's 8-bit pool; the GPU keeps fp16 or fp8.
  for (const char* name : {"q8_0", "int8"}) {
    c.kv_cache_dtype = name;
    EXPECT_EQ(*kv_cache_type(c, false), KvCacheType::kQ8_0) << name;
    const auto gpu = kv_cache_type(c, true);
    ASSERT_FALSE(gpu.is_ok()) << name;
    EXPECT_EQ(gpu.status().code(), StatusCode::kUnsupported) << name;
  }
  // Known to the ledger (`pagoda plan` sizes them) but not stored by any backend yet.
  for (const char* name : {"bf16", "fp8_e5m2", "int4"}) {
    c.kv_cache_dtype = name;
    const auto r = kv_cache_type(c, true);
    ASSERT_FALSE(r.is_ok()) << name;
    EXPECT_NE(r.status().message().find("is not built"), std::string::npos) << name;
  }
  c.kv_cache_dtype = "fp4";
  const auto r = kv_cache_type(c, true);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda
