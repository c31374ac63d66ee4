// Per input column of the layers' products over a calibration run (RunnerOptions::observer):
// the largest |x|, SmoothQuant's activation statistic (`pagoda quantize ... smoothquant`
// migrates activation outliers into the weights), and the mean |x|, AWQ's (model/awq.h:
// its per-column scales are powers of it).
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
  // Per input column, sum |x| over the rows that product saw divided by their number;
  // empty when the run never reached it.
  std::vector<float> mean_abs(int layer, Input which) const;
  int n_layers() const { return n_layers_; }
  int64_t tokens() const { return tokens_; }

 private:
  int n_layers_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> max_;   // [layer * 4 + input]
  std::vector<std::vector<double>> sum_;  // likewise: sum |x|, in double over many rows
  std::vector<int64_t> rows_;             // likewise: rows seen
};

}  // namespace pagoda
