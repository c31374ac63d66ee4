#include "model/kv_amax.h"

#include <cmath>

namespace pagoda {

void KvAmaxCollector::observe_kv(int layer, const float* k, const float* v, int64_t n,
                                 int64_t stride, int64_t kv_dim) {
  if (layer == 0) tokens_ += n;
  float& km = k_[static_cast<size_t>(layer)];
  float& vm = v_[static_cast<size_t>(layer)];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kv_dim; ++j) {
      km = std::fmax(km, std::fabs(k[i * stride + j]));
      vm = std::fmax(vm, std::fabs(v[i * stride + j]));
    }
}

}  // namespace pagoda
