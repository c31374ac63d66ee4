// ModelRunner over the CPU Model: it adds only the KV pool and workspace the Model's
// forward() takes as arguments.
#include "model/runner.h"

namespace pagoda {
namespace {

class CpuRunner : public ModelRunner {
 public:
  CpuRunner(const Model& model, ThreadPool& pool, const RunnerOptions& o)
      : model_(model),
        pool_(pool),
        kv_(model.config(), o.n_kv_blocks, o.kv_block_size, o.kv_cache_type == KvCacheType::kQ8_0),
        ws_(model.make_workspace()),
        observer_(o.observer) {}

  const ModelConfig& config() const override { return model_.config(); }
  DeviceKind device_kind() const override { return DeviceKind::kCpu; }
  std::string describe() const override {
    const std::string& c = model_.conversions();
    return str_format("cpu, %d threads", pool_.size()) +
           (c.empty() ? std::string() : " (converted " + c + ")");
  }
  size_t decode_weight_bytes() const override { return model_.decode_weight_bytes(); }
  Status forward(const Batch& batch, float* logits) override {
    return model_.forward(batch, kv_, logits, *ws_, pool_, observer_);
  }
  Status copy_block(int src, int dst) override {
    if (src < 0 || dst < 0 || src >= kv_.n_blocks() || dst >= kv_.n_blocks())
      return invalid_argument("KV block copy outside the pool");
    kv_.copy_block(src, dst);
    return Status::ok();
  }

 private:
  const Model& model_;
  ThreadPool& pool_;
  KvStorage kv_;
  Model::WorkspacePtr ws_;
  ActivationObserver* observer_;
};

}  // namespace

Status ModelRunner::forward_greedy(const Batch& batch, int32_t* tokens) {
  const int V = config().n_vocab;
  std::vector<float> logits(batch.logit_rows.size() * static_cast<size_t>(V));
  PAGODA_RETURN_IF_ERROR(forward(batch, logits.data()));
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    const float* row = logits.data() + i * static_cast<size_t>(V);
    int32_t best = 0;  // the first maximum, as engine/sampler.h's argmax
    for (int32_t j = 1; j < V; ++j)
      if (row[j] > row[best]) best = j;
    tokens[i] = best;
  }
  return Status::ok();
}

Status ModelRunner::forward_sample(const Batch&, const StepSampling&, int32_t*) {
  return unsupported("this runner does not sample on its device");
}

Status ModelRunner::launch(const Batch&, const StepSampling*) {
  return unsupported("this runner has no pipelined steps");
}

Status ModelRunner::collect(std::vector<int32_t>*) {
  return unsupported("this runner has no pipelined steps");
}

std::unique_ptr<ModelRunner> make_cpu_runner(const Model& model, ThreadPool& pool,
                                             const RunnerOptions& options) {
  return std::make_unique<CpuRunner>(model, pool, options);
}

}  // namespace pagoda
