#include "engine/executor.h"

namespace pagoda {

CpuExecutor::CpuExecutor(const Model& model, ThreadPool& pool, int n_blocks, int block_size)
    : model_(model),
      pool_(pool),
      kv_(model.config(), n_blocks, block_size),
      ws_(model.make_workspace()) {}

Status CpuExecutor::execute(const Batch& batch, float* logits) {
  return model_.forward(batch, kv_, logits, *ws_, pool_);
}

void CpuExecutor::copy_blocks(const std::vector<kv::BlockCopy>& copies) {
  for (const kv::BlockCopy& c : copies) kv_.copy_block(c.src, c.dst);
}

}  // namespace pagoda
