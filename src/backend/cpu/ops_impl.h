// Elementwise and row-wise ops, written once with GCC vector extensions and compiled per
// ISA by ops_{generic,avx2,avx512}.cpp (each defines PAGODA_OPS_NS first).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/ops.h"

namespace pagoda::cpu::PAGODA_OPS_NS {
namespace {

typedef double V8d __attribute__((vector_size(64), aligned(8)));

#include "backend/cpu/vmath_impl.h"

}  // namespace

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  // Squares in float, summed in double, as llama.cpp does.
  int64_t i = 0;
  V8d acc = V8d{};
  for (; i + 16 <= n; i += 16) {
    const V16 v = load16(x + i);
    const V16 sq = v * v;
    typedef float V8 __attribute__((vector_size(32), aligned(4)));
    V8 lo, hi;
    std::memcpy(&lo, &sq, 32);
    std::memcpy(&hi, reinterpret_cast<const char*>(&sq) + 32, 32);
    acc += __builtin_convertvector(lo, V8d) + __builtin_convertvector(hi, V8d);
  }
  double ss = 0;
  for (int l = 0; l < 8; ++l) ss += acc[l];
  for (; i < n; ++i) ss += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  i = 0;
  for (; i + 16 <= n; i += 16) store16(out + i, load16(x + i) * scale * load16(w + i));
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const V16 g = load16(gate + i);
    store16(out + i, g / (1.0f + exp16(-g)) * load16(up + i));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store16(y + i, load16(y + i) + load16(x + i));
  for (; i < n; ++i) y[i] += x[i];
}

void rope(float* x, int n_heads, int head_dim, int n_pairs, const float* cos_t, const float* sin_t,
          bool neox) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (neox) {
      int i = 0;
      for (; i + 16 <= n_pairs; i += 16) {
        const V16 a = load16(v + i), b = load16(v + i + n_pairs), c = load16(cos_t + i),
                  s = load16(sin_t + i);
        store16(v + i, a * c - b * s);
        store16(v + i + n_pairs, a * s + b * c);
      }
      for (; i < n_pairs; ++i) {
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

}  // namespace pagoda::cpu::PAGODA_OPS_NS
