// AVX-512 kernels for float weights (F32, F16, BF16). One register holds one column of
// 16 rows (F16 widened once by vcvtph2ps and reused for every token of the group); each
// token's activation is a broadcast folded into the FMA. BF16 uses vdpbf16ps on column
// pairs: bf16 x bf16 products are exact in f32, so this matches the widened product.
#include "backend/cpu/simd_avx512.h"

namespace pagoda::cpu {
namespace avx512 {
namespace {

constexpr int kG = 16;

// [k][G] f32 activations, optionally rounded through f16 (F16 weights see f16 values,
// as in llama.cpp); tokens past n are zero.
template <bool kRoundF16>
void convert_f32(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  float* out = reinterpret_cast<float*>(dst);
  // Transpose 16 columns x n tokens at a time through a small buffer: rows of x are
  // read contiguously, out is written contiguously.
  alignas(64) float buf[kG][16];
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int w = static_cast<int>(std::min<int64_t>(16, cols - c0));
    const __mmask16 m = static_cast<__mmask16>((1u << w) - 1);
    for (int t = 0; t < kG; ++t) {
      __m512 v = t < n ? _mm512_maskz_loadu_ps(m, x + t * x_stride + c0) : _mm512_setzero_ps();
      if constexpr (kRoundF16) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
      _mm512_store_ps(buf[t], v);
    }
    for (int c = 0; c < w; ++c) {
      const __m512i idx = _mm512_add_epi32(
          _mm512_set1_epi32(c),
          _mm512_mullo_epi32(_mm512_set1_epi32(16), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8,
                                                                     7, 6, 5, 4, 3, 2, 1, 0)));
      _mm512_storeu_ps(out + (c0 + c) * kG, _mm512_i32gather_ps(idx, &buf[0][0], 4));
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

// [k/2][G] pairs of bf16 (column 2p in the low half); tokens past n and an odd last
// column are zero.
void convert_bf16(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  uint32_t* out = reinterpret_cast<uint32_t*>(dst);
  const int64_t pairs = (cols + 1) / 2;
  alignas(64) uint32_t buf[kG][16];
  for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
    const int w = static_cast<int>(std::min<int64_t>(16, pairs - p0));
    const int64_t c0 = 2 * p0;
    const int64_t wc = std::min<int64_t>(32, cols - c0);
    const __mmask16 m_lo = static_cast<__mmask16>(wc >= 16 ? 0xFFFF : (1u << wc) - 1);
    const __mmask16 m_hi = static_cast<__mmask16>(wc >= 32   ? 0xFFFF
                                                  : wc <= 16 ? 0
                                                             : (1u << (wc - 16)) - 1);
    for (int t = 0; t < kG; ++t) {
      __m512i packed = _mm512_setzero_si512();
      if (t < n) {
        const float* xt = x + t * x_stride + c0;
        const __m512i a = to_bf16_bits(_mm512_maskz_loadu_ps(m_lo, xt));
        const __m512i b = to_bf16_bits(_mm512_maskz_loadu_ps(m_hi, xt + 16));
        // 32 halves in column order, then pair them up as u32 (low half = even column).
        const __m512i h = _mm512_permutex2var_epi16(
            a,
            _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                             26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0),
            b);
        packed = h;
      }
      _mm512_store_si512(buf[t], packed);
    }
    for (int c = 0; c < w; ++c) {
      const __m512i idx = _mm512_add_epi32(
          _mm512_set1_epi32(c),
          _mm512_mullo_epi32(_mm512_set1_epi32(16), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8,
                                                                     7, 6, 5, 4, 3, 2, 1, 0)));
      _mm512_storeu_si512(out + (p0 + c) * kG, _mm512_i32gather_epi32(idx, &buf[0][0], 4));
    }
  }
}

template <DType kType, int T>
inline void float_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                        int64_t y_stride, int rows) {
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
    const uint8_t* xb = act + b * kG * 4;
    if constexpr (kType == DType::kBF16) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_load_si512(qb));
      for (int t = 0; t < T; ++t)
        acc[u][t] =
            _mm512_dpbf16_ps(acc[u][t], wv, reinterpret_cast<__m512bh>(bcast32(xb + 4 * t)));
    } else {
      const __m512 wv = kType == DType::kF16 ? load_f16x16(qb)
                                             : _mm512_load_ps(reinterpret_cast<const float*>(qb));
      for (int t = 0; t < T; ++t) acc[u][t] = _mm512_fmadd_ps(wv, bcast_f32(xb + 4 * t), acc[u][t]);
    }
  };
  int64_t b = 0;
  for (; b + U <= w.nb; b += U) unroll<U>([&](auto u) { step(b + u, u); });
  for (; b < w.nb; ++b) step(b, 0);
  for (int t = 0; t < T; ++t) {
    __m512 s = acc[0][t];
    for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[u][t]);
    store_rows(y + t * y_stride, s, rows);
  }
}

template <DType kType>
void float_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(a, rg0, rg1, tg0, tg1,
                    [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows) {
                      float_micro<kType, T>(*a.w, g, act, y, a.y_stride, rows);
                    });
}

size_t f32_bytes(int64_t k) {
  return round_up64(static_cast<size_t>(k) * kG * 4);
}
size_t bf16_bytes(int64_t k) {
  return round_up64(static_cast<size_t>((k + 1) / 2) * kG * 4);
}

constexpr GemmKernel kF32{kG, f32_bytes, convert_f32<false>, float_tile<DType::kF32>};
constexpr GemmKernel kF16{kG, f32_bytes, convert_f32<true>, float_tile<DType::kF16>};
constexpr GemmKernel kBF16{kG, bf16_bytes, convert_bf16, float_tile<DType::kBF16>};

}  // namespace
}  // namespace avx512

const GemmKernel* gemm_float_avx512(DType t) {
  switch (t) {
    case DType::kF32:
      return &avx512::kF32;
    case DType::kF16:
      return &avx512::kF16;
    case DType::kBF16:
      return &avx512::kBF16;
    default:
      return nullptr;
  }
}

}  // namespace pagoda::cpu
