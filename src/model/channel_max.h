// The largest |x| each input column of the layers' products sees over a calibration run
// (RunnerOptions::observer): SmoothQuant's activation statistic, from which
// `pagoda quantize ... smoothquant` migrates activation outliers into the weights.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace pagoda {

class ChannelMaxCollector : public ActivationObserver {
 public:
  explicit ChannelMaxCollector(int n_layers);
  void observe(int layer, Input which, const float* x, int64_t n, int64_t cols) override;
  // Per input column; empty when the run never reached that product.
  const std::vector<float>& max_abs(int layer, Input which) const;
  int n_layers() const { return n_layers_; }
  int64_t tokens() const { return tokens_; }

 private:
  int n_layers_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> max_;  // [layer * 4 + input]
};

}  // namespace pagoda
