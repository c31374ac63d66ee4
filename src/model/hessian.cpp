#include "model/hessian.h"

#include "core/dtype.h"

namespace pagoda {

HessianCollector::HessianCollector(int n_layers, ThreadPool& pool)
    : n_layers_(n_layers),
      pool_(pool),
      h_(static_cast<size_t>(n_layers) * 4),
      cols_(static_cast<size_t>(n_layers) * 4, 0) {}

void HessianCollector::observe(int layer, Input which, const float* x, int64_t n, int64_t cols) {
  const size_t k = static_cast<size_t>(layer) * 4 + static_cast<size_t>(which);
  std::vector<float>& h = h_[k];
  if (h.empty()) {
    h.assign(static_cast<size_t>(cols * cols), 0.0f);
    cols_[k] = cols;
  }
  if (layer == 0 && which == Input::kQkv) tokens_ += n;
  // X^T X as the float GEMM's W x^T with W = X^T: each of the cols "tokens" of X^T against
  // the same rows.
  xt_.resize(static_cast<size_t>(cols * n));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) xt_[static_cast<size_t>(c * n + t)] = x[t * cols + c];
  auto w = cpu::WeightMatrix::from_gguf(DType::kF32, xt_.data(), cols, n);
  if (!w) {  // F32 of any shape is always taken; a failure here is a bug
    error_ = w.status();
    return;
  }
  prod_.resize(static_cast<size_t>(cols * cols));
  cpu::matmul(*w, xt_.data(), cols, n, prod_.data(), cols, pool_, scratch_);
  pool_.parallel_for(cols * cols, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) h[static_cast<size_t>(i)] += prod_[static_cast<size_t>(i)];
  });
}

const std::vector<float>& HessianCollector::sum_xxt(int layer, Input which) const {
  return h_[static_cast<size_t>(layer) * 4 + static_cast<size_t>(which)];
}

int64_t HessianCollector::cols(int layer, Input which) const {
  return cols_[static_cast<size_t>(layer) * 4 + static_cast<size_t>(which)];
}

}  // namespace pagoda
