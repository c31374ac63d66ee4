#include "engine/executor.h"

#include "engine/sampler.h"

namespace pagoda {

CpuExecutor::CpuExecutor(const Model& model, ThreadPool& pool, int n_blocks, int block_size,
                         bool q8_kv)
    : model_(model),
      pool_(pool),
      kv_(model.config(), n_blocks, block_size, q8_kv),
      ws_(model.make_workspace()) {}

Status CpuExecutor::execute(const Batch& batch, float* logits) {
  return model_.forward(batch, kv_, logits, *ws_, pool_);
}

Status CpuExecutor::execute_greedy(const Batch& batch, int32_t* tokens) {
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  logits_.resize(batch.logit_rows.size() * n_vocab);
  PAGODA_RETURN_IF_ERROR(execute(batch, logits_.data()));
  for (size_t i = 0; i < batch.logit_rows.size(); ++i)
    tokens[i] = argmax(logits_.data() + i * n_vocab, static_cast<int32_t>(n_vocab));
  return Status::ok();
}

void CpuExecutor::copy_blocks(const std::vector<kv::BlockCopy>& copies) {
  for (const kv::BlockCopy& c : copies) kv_.copy_block(c.src, c.dst);
}

}  // namespace pagoda
