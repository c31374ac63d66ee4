#include "engine/session.h"

namespace pagoda {
namespace {

constexpr int kBlockSize = 16;

RunnerOptions single_sequence(int n_ctx, int n_batch, KvCacheType kv) {
  RunnerOptions o;
  o.kv_cache_type = kv;
  o.n_kv_blocks = (n_ctx + kBlockSize - 1) / kBlockSize;
  o.kv_block_size = kBlockSize;
  o.max_batch_tokens = n_batch;
  o.max_logit_rows = n_batch;
  return o;
}

}  // namespace

Session::Session(const Model& model, ThreadPool& pool, int n_ctx, int n_batch, KvCacheType kv)
    : n_ctx_(n_ctx),
      runner_(make_cpu_runner(model, pool, single_sequence(n_ctx, n_batch, kv))),
      seq_(*runner_, n_ctx, kBlockSize, n_batch) {}

}  // namespace pagoda
