// The engine's Executor over any ModelRunner (model/runner.h), so the engine can drive
// the CUDA backend: `RunnerExecutor(make_cuda_runner(file, options))`.
#pragma once

#include <memory>
#include <utility>

#include "engine/executor.h"
#include "model/runner.h"

namespace pagoda {

class RunnerExecutor : public Executor {
 public:
  explicit RunnerExecutor(std::unique_ptr<ModelRunner> runner) : runner_(std::move(runner)) {}
  int32_t n_vocab() const override { return runner_->config().n_vocab; }
  Status execute(const Batch& batch, float* logits) override {
    if (!last_) return std::exchange(last_, Status::ok());
    return runner_->forward(batch, logits);
  }
  void copy_blocks(const std::vector<kv::BlockCopy>& copies) override {
    // The interface returns nothing here: a failed copy is reported by the next execute().
    for (const kv::BlockCopy& c : copies)
      if (Status s = runner_->copy_block(c.src, c.dst); !s && last_) last_ = s;
  }
  bool has_greedy() const override { return true; }
  Status execute_greedy(const Batch& batch, int32_t* tokens) override {
    if (!last_) return std::exchange(last_, Status::ok());
    return runner_->forward_greedy(batch, tokens);
  }
  bool has_sampling() const override { return runner_->has_device_sampling(); }
  Status execute_sample(const Batch& batch, const StepSampling& sampling,
                        int32_t* tokens) override {
    if (!last_) return std::exchange(last_, Status::ok());
    return runner_->forward_sample(batch, sampling, tokens);
  }
  // The runner's own pipeline when it has one (the device runs a step while the engine
  // handles the one before), else the default (each step at launch).
  Status launch(const Batch& batch, const StepSampling* sampling) override {
    if (!runner_->has_pipeline()) return Executor::launch(batch, sampling);
    if (!last_) return std::exchange(last_, Status::ok());
    return runner_->launch(batch, sampling);
  }
  Status collect(std::vector<int32_t>* tokens) override {
    if (!runner_->has_pipeline()) return Executor::collect(tokens);
    return runner_->collect(tokens);
  }
  ModelRunner& runner() { return *runner_; }

 private:
  std::unique_ptr<ModelRunner> runner_;
  Status last_;
};

}  // namespace pagoda
