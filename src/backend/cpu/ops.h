// Elementwise and row-wise ops of the transformer layer, on f32 rows.
#pragma once

#include <cstdint>

namespace pagoda::cpu {

// out = x / sqrt(mean(x^2) + eps) * w, one row of n. out may alias x.
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);

// Rotates the first 2*n_pairs dims of each head in `x` (n_heads heads of head_dim) by the
// angles whose cos/sin are given per pair. neox: pairs are (i, i + n_pairs), otherwise
// adjacent (2i, 2i+1).
void rope(float* x, int n_heads, int head_dim, int n_pairs, const float* cos_t, const float* sin_t,
          bool neox);

// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace pagoda::cpu
