// Elementwise and row-wise ops, written once with GCC vector extensions and compiled per
// ISA by ops_{generic,avx2,avx512}.cpp (each defines PAGODA_OPS_NS first).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/ops.h"

// The vector types are passed between inline functions of this file only.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace pagoda::cpu::PAGODA_OPS_NS {
namespace {

typedef float V16 __attribute__((vector_size(64), aligned(4)));
typedef double V8d __attribute__((vector_size(64), aligned(8)));
typedef int32_t V16i __attribute__((vector_size(64), aligned(4)));

inline V16 splat(float x) {
  return V16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}
inline V16 load(const float* p) {
  return *reinterpret_cast<const V16*>(p);
}
inline void store(float* p, V16 v) {
  *reinterpret_cast<V16*>(p) = v;
}

// exp on 16 lanes for x in [-87, 88] (clamped): reduction by ln2, degree-6 polynomial,
// ~1 ulp.
inline V16 exp16(V16 x) {
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  const V16 t = x * 1.44269504088896341f;
  const V16 n = (t + 12582912.0f) - 12582912.0f;  // round to nearest even
  const V16 r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  V16 p = splat(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const V16i bits = (__builtin_convertvector(n, V16i) + 127) << 23;
  V16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  // Squares in float, summed in double, as llama.cpp does.
  int64_t i = 0;
  V8d acc = V8d{};
  for (; i + 16 <= n; i += 16) {
    const V16 v = load(x + i);
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
  for (; i + 16 <= n; i += 16) store(out + i, load(x + i) * scale * load(w + i));
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const V16 g = load(gate + i);
    store(out + i, g / (1.0f + exp16(-g)) * load(up + i));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store(y + i, load(y + i) + load(x + i));
  for (; i < n; ++i) y[i] += x[i];
}

void rope(float* x, int n_heads, int head_dim, int n_pairs, const float* cos_t, const float* sin_t,
          bool neox) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (neox) {
      int i = 0;
      for (; i + 16 <= n_pairs; i += 16) {
        const V16 a = load(v + i), b = load(v + i + n_pairs), c = load(cos_t + i),
                  s = load(sin_t + i);
        store(v + i, a * c - b * s);
        store(v + i + n_pairs, a * s + b * c);
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
