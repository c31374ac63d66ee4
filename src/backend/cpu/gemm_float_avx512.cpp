// AVX-512 kernels for float weights (F32, F16, BF16). One register holds one column of
// 16 rows (F16 widened once by vcvtph2ps and reused for every token of the group); each
// token's activation is a broadcast folded into the FMA. BF16 uses vdpbf16ps on column
// pairs: bf16 x bf16 products are exact in f32, so this matches the widened product.
#include <iterator>

#include "backend/cpu/simd_avx512.h"

namespace pagoda::cpu {
namespace avx512 {
namespace {

constexpr int kG = 16;

// Chunked [k/16][G][16] f32 activations (gemm_kernels.h), optionally rounded through f16
// (F16 weights see f16 values, as in llama.cpp).
template <bool kRoundF16>
void convert_f32(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  float* out = reinterpret_cast<float*>(dst);
  for (int64_t c0 = 0; c0 < cols; c0 += kFloatChunk) {
    const int64_t w = std::min<int64_t>(kFloatChunk, cols - c0);
    const __mmask16 m = static_cast<__mmask16>((1u << w) - 1);
    for (int t = 0; t < n; ++t) {
      __m512 v = _mm512_maskz_loadu_ps(m, x + t * x_stride + c0);
      if constexpr (kRoundF16) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
      _mm512_store_ps(out + chunked_index(c0, t, kG), v);
    }
  }
}

// f32 -> bf16 with round to nearest even, quiet NaNs; integer arithmetic so it matches
// f32_to_bf16 on every input (vcvtneps2bf16 flushes denormals).
inline __m512i to_bf16_bits(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(64));
}

// The chunked layout over column pairs: a u32 holds bf16 of columns 2p (low half) and
// 2p + 1; an odd last column pairs with zero.
void convert_bf16(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  uint32_t* out = reinterpret_cast<uint32_t*>(dst);
  // Result half i (0..31) = column i: the low half of lane i of a (i < 16) or b.
  const __m512i interleave =
      _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26,
                       24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const int64_t pairs = (cols + 1) / 2;
  for (int64_t p0 = 0; p0 < pairs; p0 += kFloatChunk) {
    const int64_t c0 = 2 * p0;
    const int64_t wc = std::min<int64_t>(32, cols - c0);
    const __mmask16 m_lo = static_cast<__mmask16>(wc >= 16 ? 0xFFFF : (1u << wc) - 1);
    const __mmask16 m_hi = static_cast<__mmask16>(wc >= 32   ? 0xFFFF
                                                  : wc <= 16 ? 0
                                                             : (1u << (wc - 16)) - 1);
    for (int t = 0; t < n; ++t) {
      const float* xt = x + t * x_stride + c0;
      const __m512i a = to_bf16_bits(_mm512_maskz_loadu_ps(m_lo, xt));
      const __m512i b = to_bf16_bits(_mm512_maskz_loadu_ps(m_hi, xt + 16));
      _mm512_store_si512(out + chunked_index(p0, t, kG),
                         _mm512_permutex2var_epi16(a, interleave, b));
    }
  }
}

template <DType kType, int T>
inline void float_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                        int64_t y_stride, int rows, const uint8_t* pf_end) {
  // A column (pair) per step; with few tokens, U steps run in flight on separate
  // accumulators to cover the FMA latency.
  constexpr int U = T >= 4 ? 1 : T == 1 ? 4 : 2;
  const uint8_t* q = w.quants(g, 0);
  constexpr int kStepBytes = kType == DType::kF16 ? 32 : 64;
  __m512 acc[U][T];
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < T; ++t) acc[u][t] = _mm512_setzero_ps();
  auto step = [&](int64_t b, int u) {
    const uint8_t* qb = q + b * kStepBytes;
    const uint8_t* xb = act + chunked_index(b, 0, kG) * 4;
    if constexpr (kType == DType::kBF16) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_load_si512(qb));
      for (int t = 0; t < T; ++t)
        acc[u][t] =
            _mm512_dpbf16_ps(acc[u][t], wv, reinterpret_cast<__m512bh>(bcast32(xb + 64 * t)));
    } else {
      const __m512 wv = kType == DType::kF16 ? load_f16x16(qb)
                                             : _mm512_load_ps(reinterpret_cast<const float*>(qb));
      for (int t = 0; t < T; ++t)
        acc[u][t] = _mm512_fmadd_ps(wv, bcast_f32(xb + 64 * t), acc[u][t]);
    }
  };
  int64_t b = 0;
  for (; b + U <= w.nb; b += U) {
    if constexpr (T <= 4) prefetch(q + b * kStepBytes + kPrefetchBytes, U * kStepBytes, pf_end);
    unroll<U>([&](auto u) { step(b + u, u); });
  }
  for (; b < w.nb; ++b) step(b, 0);
  for (int t = 0; t < T; ++t) {
    __m512 s = acc[0][t];
    for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[u][t]);
    store_rows(y + t * y_stride, s, rows);
  }
}

template <DType kType>
void float_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(
      a, rg0, rg1, tg0, tg1,
      [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows, const uint8_t* end) {
        float_micro<kType, T>(*a.w, g, act, y, a.y_stride, rows, end);
      });
}

size_t f32_bytes(int64_t k) {
  return chunked_bytes(k, kG);
}
size_t bf16_bytes(int64_t k) {
  return chunked_bytes((k + 1) / 2, kG);
}

constexpr GemmEntry kTable[] = {
    {DType::kF32, {kG, f32_bytes, convert_f32<false>, float_tile<DType::kF32>}},
    {DType::kF16, {kG, f32_bytes, convert_f32<true>, float_tile<DType::kF16>}},
    {DType::kBF16, {kG, bf16_bytes, convert_bf16, float_tile<DType::kBF16>}}};

}  // namespace
}  // namespace avx512

const GemmKernel* gemm_float_avx512(DType t) {
  return find_gemm(avx512::kTable, std::size(avx512::kTable), t);
}

}  // namespace pagoda::cpu
