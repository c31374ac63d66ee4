// Online softmax (FlashAttention's running maximum and sum) for the attention kernels,
// written once. Scores are kept in log2 units (pre-multiplied by log2 e), so each
// exponential is one exp2 instruction. A row's state is its running maximum m and sum l;
// taking in a tile of scores moves m to the larger maximum and rescales l and the
// output accumulators by exp2(m_old - m_new), which is 0 on the first tile and 1 once
// the maximum settles (the kernels skip the rescale then).
#pragma once

#include "backend/cuda/mma.cuh"

namespace pagoda::cuda {

// Moves a row's running maximum m to include a tile's maximum mx (finite: every tile a
// kernel folds in holds at least one key in range). Returns the factor for the row's
// sum and accumulators.
__device__ __forceinline__ float online_max(float& m, float mx) {
  const float mn = fmaxf(m, mx);
  const float a = exp2f(m - mn);
  m = mn;
  return a;
}

// The sum (maximum) of a value over the four lanes of a quad: the lanes that hold one
// row of an m16n8 C fragment.
__device__ __forceinline__ float quad_sum(float v) {
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float quad_max(float v) {
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// One tile of a warp's scores with the query rows on the mma's M side (the prefill and
// fp16 decode kernels): s[nt] holds keys nt*8 + 2c, +1 of rows g (c0, c1) and g+8 (c2,
// c3), g = lane / 4, c = lane % 4, already scaled to log2 units and masked to -inf. Folds
// the tile into the two rows' (m, l), l being this lane's share of the sum; leaves the
// probabilities exp2(s - m) in s; rescales the HD/8 output fragments o unless no row's
// maximum moved anywhere in the warp (multiplying by 1 changes nothing, so skipping
// is exact). The whole warp must call it.
template <int KEYS, int HD>
__device__ __forceinline__ void softmax_tile_m16(float (*s)[4], float (*o)[4], float& m0, float& m1,
                                                 float& l0, float& l1) {
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < KEYS / 8; ++nt) {
    mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
    mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
  }
  const float a0 = online_max(m0, quad_max(mx0)), a1 = online_max(m1, quad_max(mx1));
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int nt = 0; nt < KEYS / 8; ++nt) {
    s[nt][0] = exp2f(s[nt][0] - m0);
    s[nt][1] = exp2f(s[nt][1] - m0);
    s[nt][2] = exp2f(s[nt][2] - m1);
    s[nt][3] = exp2f(s[nt][3] - m1);
    sum0 += s[nt][0] + s[nt][1];
    sum1 += s[nt][2] + s[nt][3];
  }
  l0 = l0 * a0 + sum0;
  l1 = l1 * a1 + sum1;
  if (__any_sync(0xffffffffu, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
      o[i][0] *= a0;
      o[i][1] *= a0;
      o[i][2] *= a1;
      o[i][3] *= a1;
    }
  }
}

// o += P V for the tile softmax_tile_m16 left in s: the probability fragments of key
// groups 2kk and 2kk+1 form P's A fragment (rounded to fp16), V is staged in shared
// memory as rows of `stride` halves.
template <int KEYS, int HD>
__device__ __forceinline__ void pv_tile_m16(float (*o)[4], const float (*s)[4], const __half* v_s,
                                            int stride, int lane) {
#pragma unroll
  for (int kk = 0; kk < KEYS / 16; ++kk) {
    uint32_t pf[4];
    pf[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
    pf[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
    pf[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pf[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    pv_step<HD>(o, pf, v_s, stride, kk, lane);
  }
}

}  // namespace pagoda::cuda
