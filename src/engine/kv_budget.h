// How many KV blocks the engine allocates: from --kv-cache-memory, or a fraction of the
// memory available at start, never more than max_num_seqs full-length sequences can use.
// The bytes per token and the block count come from the memory ledger (src/ledger), the
// code behind `pagoda plan`. The ledger's arithmetic depends only on core and the model
// config, so the engine may use it although the planner as a whole sits above.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/model_config.h"
#include "pagoda/engine.h"

namespace pagoda {

struct KvBudget {
  int64_t pool_bytes = 0;  // n_blocks * bytes per block
  int n_blocks = 0;
  int64_t bytes_per_token = 0;
};

// Fails with advice when the pool cannot hold even one max_model_len sequence.
Result<KvBudget> plan_kv_pool(const ModelConfig& model, const EngineConfig& config);

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
int64_t available_memory_bytes();

}  // namespace pagoda
