#include "model/channel_max.h"

#include <algorithm>
#include <cmath>

namespace pagoda {

ChannelMaxCollector::ChannelMaxCollector(int n_layers)
    : n_layers_(n_layers), max_(static_cast<size_t>(n_layers) * 4) {}

void ChannelMaxCollector::observe(int layer, Input which, const float* x, int64_t n, int64_t cols) {
  std::vector<float>& m = max_[static_cast<size_t>(layer) * 4 + static_cast<size_t>(which)];
  if (m.empty()) m.assign(static_cast<size_t>(cols), 0.0f);
  if (layer == 0 && which == Input::kQkv) tokens_ += n;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c)
      m[static_cast<size_t>(c)] = std::max(m[static_cast<size_t>(c)], std::fabs(x[t * cols + c]));
}

const std::vector<float>& ChannelMaxCollector::max_abs(int layer, Input which) const {
  return max_[static_cast<size_t>(layer) * 4 + static_cast<size_t>(which)];
}

}  // namespace pagoda
