// How many KV blocks the engine allocates: from --kv-cache-memory, or a fraction of the
// memory available at start, never more than max_num_seqs full-length sequences can use.
// The bytes per token and the block count come from the memory ledger (src/ledger), the
// code behind `pagoda plan`. The ledger's arithmetic depends only on core and the model
// config, so the engine may use it although the planner as a whole sits above.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/runner.h"
#include "pagoda/engine.h"

namespace pagoda {

struct KvBudget {
  int64_t pool_bytes = 0;  // n_blocks * bytes per block
  int n_blocks = 0;
  int64_t bytes_per_token = 0;
};

// config.kv_cache_dtype as the runner stores it: "auto" and "fp16" are 16-bit, "fp8" and
// "fp8_e4m3" FP8 E4M3 (GPU only); other names the ledger knows (bf16, fp8_e5m2, int8, int4)
// are refused as not built, unknown ones as unknown.
Result<KvCacheType> kv_cache_type(const EngineConfig& config, bool gpu);

// Whether config.quantization asks for FP8 weights ("fp8"; "" and "none" do not); other
// names are refused, as is FP8 on the CPU.
Result<bool> fp8_weights(const EngineConfig& config, bool gpu);

// Fails with advice when the pool cannot hold even one max_model_len sequence.
Result<KvBudget> plan_kv_pool(const ModelConfig& model, const EngineConfig& config);

// On a GPU: the memory ledger's plan (ledger::make_plan) of this model file on a device of
// `total_bytes`, with the engine's batch limits and either config.kv_cache_memory or
// config.gpu_memory_utilization; fails when weights and overheads leave no room for one
// max_model_len sequence, or when `free_bytes` cannot hold the planned budget. It parses
// --kv-cache-dtype and --quantization for the plan, and hands them on for the runner.
struct GpuKvBudget {
  KvBudget kv;
  int64_t budget_bytes = 0;    // what the plan may use of the device
  int64_t weight_bytes = 0;    // the plan's figures, for the start-up log
  int64_t overhead_bytes = 0;  // activations, logits, runtime

  // The flags as parsed for the plan, for the runner.
  KvCacheType kv_cache_type = KvCacheType::k16Bit;  // config.kv_cache_dtype
  bool fp8_weights = false;                         // config.quantization
};
Result<GpuKvBudget> plan_gpu_kv_pool(const TensorSource& file, int64_t model_context,
                                     const EngineConfig& config, int64_t free_bytes,
                                     int64_t total_bytes);

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
int64_t available_memory_bytes();

}  // namespace pagoda
