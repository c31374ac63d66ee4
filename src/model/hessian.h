// Each linear layer input's second moment over a calibration run (RunnerOptions::observer):
// H = sum over tokens of x x^T, GPTQ's Hessian (up to the factor 2 / tokens, which nothing
// downstream depends on: GPTQ's dampening is relative to H's mean diagonal). The products
// that read one input (q/k/v; gate/up) share one matrix.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace pagoda {

class HessianCollector : public ActivationObserver {
 public:
  // `pool` accumulates each batch; observe() is called between the forward pass's parallel
  // ops, never inside one.
  HessianCollector(int n_layers, ThreadPool& pool);
  void observe(int layer, Input which, const float* x, int64_t n, int64_t cols) override;
  // Row-major [cols, cols], symmetric; empty when the run never reached that product.
  const std::vector<float>& sum_xxt(int layer, Input which) const;
  int64_t cols(int layer, Input which) const;
  // Not ok if a product could not be accumulated (observe() cannot return it).
  const Status& status() const { return error_; }
  int n_layers() const { return n_layers_; }
  int64_t tokens() const { return tokens_; }

 private:
  int n_layers_;
  ThreadPool& pool_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> h_;  // [layer * 4 + input]
  std::vector<int64_t> cols_;
  std::vector<float> xt_, prod_;  // one batch's X^T and X^T X
  cpu::MatmulScratch scratch_;
  Status error_;
};

}  // namespace pagoda
