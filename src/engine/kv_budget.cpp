#include "engine/kv_budget.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ledger/memory.h"
#include "ledger/model_shape.h"
#include "ledger/plan.h"
#include "ledger/sources.h"

namespace pagoda {

int64_t available_memory_bytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  std::fclose(f);
  return static_cast<int64_t>(kb) * 1024;
}

Result<KvCacheType> kv_cache_type(const EngineConfig& config, bool gpu) {
  const std::string& n = config.kv_cache_dtype;
  if (n == "auto" || n == "fp16" || n == "f16" || n == "float16") return KvCacheType::k16Bit;
  if (n == "fp8" || n == "fp8_e4m3") {
    if (!gpu)
      return unsupported("--kv-cache-dtype " + n +
                         ": the CPU backend keeps the KV cache in fp16 or q8_0; FP8 needs "
                         "--device cuda");
    return KvCacheType::kFp8;
  }
  if (n == "q8_0" || n == "int8") {
    if (gpu)
      return unsupported("--kv-cache-dtype " + n +
                         ": the CUDA backend keeps the KV cache in fp16 or fp8; q8_0 is the "
                         "CPU's");
    return KvCacheType::kQ8_0;
  }
  if (ledger::parse_kv_dtype(n))
    return unsupported("--kv-cache-dtype " + n +
                       " is not built: the KV cache is auto (16-bit), fp16, fp8 (E4M3, GPU) or "
                       "q8_0 (CPU)");
  return invalid_argument("unknown --kv-cache-dtype '" + n + "' (auto, fp16, fp8 or q8_0)");
}

Result<bool> fp8_weights(const EngineConfig& config, bool gpu) {
  const std::string& q = config.quantization;
  if (q.empty() || q == "none") return false;
  if (q != "fp8") return invalid_argument("unknown --quantization '" + q + "' (fp8)");
  if (!gpu) return unsupported("--quantization fp8 needs --device cuda");
  return true;
}

Result<KvBudget> plan_kv_pool(const ModelConfig& model, const EngineConfig& config) {
  KvBudget b;
  // The ledger's arithmetic, so `pagoda plan` states exactly what is allocated here.
  const ledger::ModelShape shape = ledger::shape_from_config(model);
  PAGODA_ASSIGN_OR_RETURN(const KvCacheType kv, kv_cache_type(config, /*gpu=*/false));
  const ledger::KvDtype dtype =
      kv == KvCacheType::kQ8_0 ? ledger::KvDtype::kInt8 : ledger::KvDtype::kFp16;
  b.bytes_per_token = ledger::kv_bytes_per_token(shape, dtype);
  const int64_t block_bytes = b.bytes_per_token * config.block_size;
  const int64_t max_len = config.max_model_len > 0 ? config.max_model_len : model.context_length;
  int64_t budget = config.kv_cache_memory;
  if (budget <= 0) {
    if (!(config.kv_cache_fraction > 0 && config.kv_cache_fraction <= 1))
      return invalid_argument("--kv-cache-fraction must be in (0, 1]");
    const int64_t avail = available_memory_bytes();
    if (avail <= 0)
      return invalid_argument("cannot read the available memory; give --kv-cache-memory BYTES");
    budget = static_cast<int64_t>(static_cast<double>(avail) * config.kv_cache_fraction);
    // More than every sequence at full length can never be used.
    const int64_t blocks_per_seq = (max_len + config.block_size - 1) / config.block_size;
    budget = std::min(budget, blocks_per_seq * config.max_num_seqs * block_bytes);
  }
  const int64_t n = ledger::kv_pool_blocks(shape, dtype, budget, config.block_size);
  const int64_t one_seq = (max_len + config.block_size - 1) / config.block_size;
  if (n < one_seq)
    return Status(
        StatusCode::kResourceExhausted,
        str_format("the KV pool (%lld bytes, %lld blocks of %d tokens) cannot hold one "
                   "sequence of max_model_len %lld tokens (%lld bytes per token); raise "
                   "--kv-cache-memory or lower --max-model-len",
                   static_cast<long long>(budget), static_cast<long long>(n), config.block_size,
                   static_cast<long long>(max_len), static_cast<long long>(b.bytes_per_token)));
  if (n > INT32_MAX) return invalid_argument("--kv-cache-memory is too large");
  b.n_blocks = static_cast<int>(n);
  b.pool_bytes = n * block_bytes;
  return b;
}

Result<GpuKvBudget> plan_gpu_kv_pool(const TensorSource& file, int64_t model_context,
                                     const EngineConfig& config, int64_t free_bytes,
                                     int64_t total_bytes) {
  PAGODA_ASSIGN_OR_RETURN(ledger::ModelSource src, ledger::source_from_tensors(file));
  ledger::restate_for_cuda(&src);  // the bytes the loader will put on the device
  ledger::PlanInput in = ledger::input_from_source(src);
  PAGODA_ASSIGN_OR_RETURN(const KvCacheType kv, kv_cache_type(config, /*gpu=*/true));
  in.kv_dtype = kv == KvCacheType::kFp8 ? ledger::KvDtype::kFp8 : ledger::KvDtype::kFp16;
  PAGODA_ASSIGN_OR_RETURN(const bool fp8, fp8_weights(config, /*gpu=*/true));
  if (fp8) {
    // The ledger's fp8 convention is what the loader does: the blocks' linear layers in
    // one byte, embeddings, LM head and norms as before (counted 16-bit).
    PAGODA_ASSIGN_OR_RETURN(in.weight_type, ledger::parse_weight_type("fp8"));
    in.exact_weights = false;
  }
  in.context = config.max_model_len > 0 ? config.max_model_len : model_context;
  in.concurrency = 1;
  in.device = {config.device, total_bytes, true};
  in.gpu_memory_utilization = config.gpu_memory_utilization;
  in.kv_cache_memory = config.kv_cache_memory;
  in.max_num_batched_tokens = config.max_num_batched_tokens;
  in.max_num_seqs = config.max_num_seqs;
  in.block_size = config.block_size;
  if (config.kv_cache_memory <= 0 &&
      !(config.gpu_memory_utilization > 0 && config.gpu_memory_utilization <= 1))
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  PAGODA_ASSIGN_OR_RETURN(const ledger::Plan plan, ledger::make_plan(in, /*suggest=*/false));
  GpuKvBudget g;
  g.kv_cache_type = kv;
  g.fp8_weights = fp8;
  g.budget_bytes = plan.budget_bytes;
  g.weight_bytes = plan.weight_bytes;
  g.overhead_bytes = plan.overheads.total();
  g.kv.bytes_per_token = plan.kv_bytes_per_token;
  const int64_t one_seq = (in.context + config.block_size - 1) / config.block_size;
  if (plan.kv_pool_blocks < one_seq)
    return Status(StatusCode::kResourceExhausted,
                  str_format("%s: weights (%.2f GiB) and overheads (%.2f GiB) leave a KV pool of "
                             "%lld blocks, less than one sequence of max_model_len %lld tokens "
                             "(%lld blocks); raise --gpu-memory-utilization or lower "
                             "--max-model-len (see `pagoda plan`)",
                             config.device.c_str(), plan.weight_bytes / 1073741824.0,
                             plan.overheads.total() / 1073741824.0,
                             static_cast<long long>(plan.kv_pool_blocks),
                             static_cast<long long>(in.context), static_cast<long long>(one_seq)));
  if (plan.kv_pool_blocks > INT32_MAX) return invalid_argument("the KV pool is too large");
  // The plan's runtime share is the CUDA context, which exists by now and so is no longer
  // free: what remains must hold the rest.
  const int64_t need = plan.weight_bytes + plan.overheads.total() - plan.overheads.runtime +
                       plan.kv_pool_blocks * config.block_size * plan.kv_bytes_per_token;
  if (need > free_bytes)
    return Status(StatusCode::kResourceExhausted,
                  str_format("%s has %.2f GiB free of %.2f GiB, and the plan needs %.2f GiB more "
                             "(another process holds GPU memory?); lower "
                             "--gpu-memory-utilization or give --kv-cache-memory",
                             config.device.c_str(), free_bytes / 1073741824.0,
                             total_bytes / 1073741824.0, need / 1073741824.0));
  g.kv.n_blocks = static_cast<int>(plan.kv_pool_blocks);
  g.kv.pool_bytes = plan.kv_pool_blocks * config.block_size * plan.kv_bytes_per_token;
  return g;
}

}  // namespace pagoda
