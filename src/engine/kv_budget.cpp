#include "engine/kv_budget.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ledger/memory.h"
#include "ledger/model_shape.h"

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

Result<KvBudget> plan_kv_pool(const ModelConfig& model, const EngineConfig& config) {
  KvBudget b;
  // The ledger's arithmetic, so `pagoda plan` states exactly what is allocated here.
  const ledger::ModelShape shape = ledger::shape_from_config(model);
  b.bytes_per_token = ledger::kv_bytes_per_token(shape, ledger::KvDtype::kFp16);
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
  const int64_t n =
      ledger::kv_pool_blocks(shape, ledger::KvDtype::kFp16, budget, config.block_size);
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

}  // namespace pagoda
