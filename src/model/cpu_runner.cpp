// ModelRunner over the CPU Model: it adds only the KV pool and workspace the Model's
// forward() takes as arguments.
#include "backend/cpu/vec.h"
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
  size_t weight_bytes() const override { return model_.weight_bytes(); }
  Status forward(const Batch& batch, const StepOutput& out) override;
  // Greedy picks are the argmax of its own logits (cheap next to the pass): greedy
  // requests take the pipelined path on the CPU too. Sampled draws are the host
  // sampler's (engine/sampler), from the logits.
  bool picks_tokens(bool sampled) const override { return !sampled; }
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
  std::vector<float> logits_;  // greedy steps' logits, kept between calls
};

Status CpuRunner::forward(const Batch& batch, const StepOutput& out) {
  PAGODA_RETURN_IF_ERROR(out.check());
  if (!out.tokens) return model_.forward(batch, kv_, out.logits, *ws_, pool_, observer_);
  if (out.sampling) return unsupported("the CPU runner does not draw sampled tokens itself");
  const size_t V = static_cast<size_t>(model_.config().n_vocab);
  logits_.resize(batch.logit_rows.size() * V);
  PAGODA_RETURN_IF_ERROR(model_.forward(batch, kv_, logits_.data(), *ws_, pool_, observer_));
  for (size_t i = 0; i < batch.logit_rows.size(); ++i)  // the host sampler's argmax
    out.tokens[i] =
        static_cast<int32_t>(cpu::argmax_f32(static_cast<int64_t>(V), logits_.data() + i * V));
  return Status::ok();
}

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(const Model& model, ThreadPool& pool,
                                             const RunnerOptions& options) {
  return std::make_unique<CpuRunner>(model, pool, options);
}

}  // namespace pagoda
