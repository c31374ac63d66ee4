#include "model/channel_max.h"

#include <algorithm>
#include <cmath>

namespace pagoda {

ChannelMaxCollector::ChannelMaxCollector(int n_layers)
    : n_layers_(n_layers),
      max_(static_cast<size_t>(n_layers) * 4),
      sum_(static_cast<size_t>(n_layers) * 4),
      rows_(static_cast<size_t>(n_layers) * 4, 0) {}

void ChannelMaxCollector::observe(int layer, Input which, const float* x, int64_t n, int64_t cols) {
  const size_t k = static_cast<size_t>(layer) * 4 + static_cast<size_t>(which);
  std::vector<float>& m = max_[k];
  std::vector<double>& s = sum_[k];
  if (m.empty()) {
    m.assign(static_cast<size_t>(cols), 0.0f);
    s.assign(static_cast<size_t>(cols), 0.0);
  }
  if (layer == 0 && which == Input::kQkv) tokens_ += n;
  rows_[k] += n;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      const float a = std::fabs(x[t * cols + c]);
      m[static_cast<size_t>(c)] = std::max(m[static_cast<size_t>(c)], a);
      s[static_cast<size_t>(c)] += a;
    }
}

const std::vector<float>& ChannelMaxCollector::max_abs(int layer, Input which) const {
  return max_[static_cast<size_t>(layer) * 4 + static_cast<size_t>(which)];
}

std::vector<float> ChannelMaxCollector::mean_abs(int layer, Input which) const {
  const size_t k = static_cast<size_t>(layer) * 4 + static_cast<size_t>(which);
  std::vector<float> out(sum_[k].size());
  for (size_t c = 0; c < out.size(); ++c)
    out[c] = static_cast<float>(sum_[k][c] / static_cast<double>(rows_[k]));
  return out;
}

}  // namespace pagoda
