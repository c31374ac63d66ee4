#include "backend/cpu/ops.h"

#include <cmath>

namespace pagoda::cpu {

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  // Sum of squares in double, as llama.cpp does, so long rows lose nothing to rounding.
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void rope(float* x, int n_heads, int head_dim, int n_pairs, const float* cos_t, const float* sin_t,
          bool neox) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (neox) {
      for (int i = 0; i < n_pairs; ++i) {
        const float a = v[i], b = v[i + n_pairs];
        v[i] = a * cos_t[i] - b * sin_t[i];
        v[i + n_pairs] = a * sin_t[i] + b * cos_t[i];
      }
    } else {
      for (int i = 0; i < n_pairs; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos_t[i] - b * sin_t[i];
        v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
      }
    }
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace pagoda::cpu
