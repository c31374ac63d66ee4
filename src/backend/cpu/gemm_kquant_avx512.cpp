// AVX-512 VNNI kernels for Q2_K to Q6_K against Q8_K activations. Per 32-column
// sub-block the weights are unpacked to unsigned bytes (4-bit nibbles plus the fifth or
// fifth-and-sixth bits), vpdpbusd'd against each token, multiplied by the sub-block's
// integer scale and summed in int32 over the super-block; the f16 super-block scales
// are applied once per 256 columns. Mins (Q4_K/Q5_K) are one vpdpwssd of the per-row 6-bit
// mins against the activation's per-32 sums; Q6_K's -32 offset starts each sub-block
// sum at -32 * (activation sum).
#include <iterator>

#include "backend/cpu/simd_avx512.h"

namespace pagoda::cpu {
namespace avx512 {
namespace {

constexpr int kG = 8;  // three sets of T accumulators must fit the 32 registers

void convert_q8k(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  const Q8KActLayout lay{cols / kQKK, kG};
  for (int t = 0; t < n; ++t) {
    for (int64_t b = 0; b < lay.ns; ++b) {
      const float* xb = x + t * x_stride + b * kQKK;
      __m512 v[16];
      __m512 amax_v = _mm512_setzero_ps();
      for (int i = 0; i < 16; ++i) {
        v[i] = _mm512_loadu_ps(xb + 16 * i);
        amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(v[i]));
      }
      const float amax = _mm512_reduce_max_ps(amax_v);
      int8_t* qs = reinterpret_cast<int8_t*>(dst + lay.qs(b, t));
      int16_t bsum16[16];
      float d = 0.0f;
      if (amax == 0.0f) {
        std::memset(qs, 0, kQKK);
        std::memset(bsum16, 0, sizeof(bsum16));
      } else {
        // The reference keeps the sign of the first element of largest magnitude.
        float max = 0.0f;
        for (int i = 0; i < 16; ++i) {
          const __mmask16 hit =
              _mm512_cmp_ps_mask(_mm512_abs_ps(v[i]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
          if (hit != 0) {
            max = xb[16 * i + __builtin_ctz(hit)];
            break;
          }
        }
        const float iscale = -127.0f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int i = 0; i < 16; ++i) {
          // cvtps2dq rounds to nearest even under the default MXCSR, as nearest_int.
          const __m512i q =
              _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, v[i])), _mm512_set1_epi32(127));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * i), _mm512_cvtepi32_epi8(q));
          bsum16[i] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
        }
        d = 1.0f / iscale;
      }
      store_q8k_sums(bsum16, d, lay, b, t, dst);
    }
  }
}

template <DType kType, int T>
inline void k4_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                     int64_t y_stride, int rows, const uint8_t* pf_end) {
  const Q8KActLayout lay{w.nb, kG};
  constexpr int kSubBytes = kType == DType::kQ4_K ? 256 : 320;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m10 = _mm512_set1_epi8(0x10);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < w.nb; ++sb) {
    const uint8_t* q = w.quants(g, sb);
    const uint8_t* s = w.scales(g, sb);
    const uint8_t* xq = act + lay.qs(sb, 0);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qj = q + j * kSubBytes;
      if constexpr (T <= 4) prefetch(qj + kPrefetchBytes, kSubBytes + 40, pf_end);
      __m512i ia[T];
      for (int t = 0; t < T; ++t) ia[t] = _mm512_setzero_si512();
      unroll<4>([&](auto m) {
        const __m512i raw = _mm512_load_si512(qj + 64 * m);
        __m512i lo = _mm512_and_si512(raw, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        if constexpr (kType == DType::kQ5_K) {
          // Byte bit s is the fifth bit of column 4s + e: steps m and m + 4 here.
          const __m512i qh = _mm512_load_si512(qj + 256);
          lo = _mm512_or_si512(lo, move_bits<m, 4>(qh, m10));
          hi = _mm512_or_si512(hi, move_bits<m + 4, 4>(qh, m10));
        }
        for (int t = 0; t < T; ++t) {
          const uint8_t* xt = xq + kQKK * t + 32 * j;
          ia[t] = _mm512_dpbusd_epi32(ia[t], lo, bcast32(xt + 4 * m));
          ia[t] = _mm512_dpbusd_epi32(ia[t], hi, bcast32(xt + 16 + 4 * m));
        }
      });
      const __m512i sc =
          _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s + 64 + 16 * j)));
      for (int t = 0; t < T; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(ia[t], sc));
    }
    __m512i mins[4];
    for (int p = 0; p < 4; ++p)
      mins[p] = _mm512_cvtepu8_epi16(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(s + 192 + 32 * p)));
    const __m512 d = load_f16x16(s), dmin = load_f16x16(s + 32);
    for (int t = 0; t < T; ++t) {
      const uint8_t* bs = act + lay.bsum32(sb, t);
      __m512i ms = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) ms = _mm512_dpwssd_epi32(ms, mins[p], bcast32(bs + 4 * p));
      const __m512 dx = bcast_f32(act + lay.d(sb, t));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dmin, dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

// Q6_K and Q3_K: sub-blocks of 16 columns with an i8 scale each. Q6_K's values are the
// nibble plus bits 4..5 from one of two 64-byte lines (steps 0..3 low nibbles and the
// first line, steps 4..7 high nibbles and the second), offset -32, which starts each
// sub-block's sum at the activation's -32 * sum. Q3_K's are q + 4: bits 0..1 from one of
// two lines, bit 2 from a third, offset -4: that start shifted right by 3 (exact: a
// multiple of 32).
template <DType kType, int T>
inline void k16_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                      int64_t y_stride, int rows, const uint8_t* pf_end) {
  constexpr bool kQ6 = kType == DType::kQ6_K;
  constexpr int kSubBytes = kQ6 ? 384 : 192;
  const Q8KActLayout lay{w.nb, kG};
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i b01 = _mm512_set1_epi8(0x03), b2 = _mm512_set1_epi8(0x04);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < w.nb; ++sb) {
    const uint8_t* q = w.quants(g, sb);
    const uint8_t* s = w.scales(g, sb);
    const uint8_t* xq = act + lay.qs(sb, 0);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qj = q + kSubBytes * j;
      if constexpr (T <= 4) prefetch(qj + kPrefetchBytes, kSubBytes + 40, pf_end);
      const __m512i top = kQ6 ? _mm512_setzero_si512() : _mm512_load_si512(qj + 128);
      unroll<2>([&](auto half) {
        const __m512i line = _mm512_load_si512(qj + (kQ6 ? 256 : 0) + 64 * half);
        const int sub = 2 * j + half;
        __m512i ia[T];
        for (int t = 0; t < T; ++t) {
          ia[t] = bcast32(act + lay.corr16(sb, t) + 4 * sub);
          if constexpr (!kQ6) ia[t] = _mm512_srai_epi32(ia[t], 3);
        }
        unroll<4>([&](auto m) {
          __m512i wv;
          if constexpr (kQ6) {
            const __m512i raw = _mm512_load_si512(qj + 64 * m);
            const __m512i nib = half == 0 ? _mm512_and_si512(raw, m4)
                                          : _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            wv = _mm512_or_si512(nib, move_bits<2 * m, 4>(line, m30));
          } else {
            wv = _mm512_or_si512(move_bits<2 * m, 0>(line, b01),
                                 move_bits<4 * half + m, 2>(top, b2));
          }
          for (int t = 0; t < T; ++t)
            ia[t] =
                _mm512_dpbusd_epi32(ia[t], wv, bcast32(xq + kQKK * t + 32 * j + 16 * half + 4 * m));
        });
        const __m512i sc = _mm512_cvtepi8_epi32(
            _mm_load_si128(reinterpret_cast<const __m128i*>(s + 32 + 16 * sub)));
        for (int t = 0; t < T; ++t)
          isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(ia[t], sc));
      });
    }
    const __m512 d = load_f16x16(s);
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                               _mm512_mul_ps(d, bcast_f32(act + lay.d(sb, t))), acc[t]);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

// Q2_K: 2-bit values from Q3_K's two low lines, per 16 columns d * sc * q - dmin * m
// with sc and m the nibbles of one byte per row; the mins meet the activation's sums per
// 16, which are its corr16 / -32, so sum(m * corr16) is -32 times what is subtracted.
template <int T>
inline void q2k_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                      int64_t y_stride, int rows, const uint8_t* pf_end) {
  const Q8KActLayout lay{w.nb, kG};
  const __m512i m3 = _mm512_set1_epi8(0x03);
  const __m512i m15 = _mm512_set1_epi32(0x0F);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < w.nb; ++sb) {
    const uint8_t* q = w.quants(g, sb);
    const uint8_t* s = w.scales(g, sb);
    const uint8_t* xq = act + lay.qs(sb, 0);
    __m512i isum[T], msum[T];
    for (int t = 0; t < T; ++t) isum[t] = msum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qj = q + 128 * j;
      if constexpr (T <= 4) prefetch(qj + kPrefetchBytes, 128 + 40, pf_end);
      unroll<2>([&](auto half) {
        const __m512i low = _mm512_load_si512(qj + 64 * half);
        const int sub = 2 * j + half;
        __m512i ia[T];
        for (int t = 0; t < T; ++t) ia[t] = _mm512_setzero_si512();
        unroll<4>([&](auto m) {
          const __m512i wv = move_bits<2 * m, 0>(low, m3);
          for (int t = 0; t < T; ++t)
            ia[t] =
                _mm512_dpbusd_epi32(ia[t], wv, bcast32(xq + kQKK * t + 32 * j + 16 * half + 4 * m));
        });
        const __m512i scm = _mm512_cvtepu8_epi32(
            _mm_load_si128(reinterpret_cast<const __m128i*>(s + 64 + 16 * sub)));
        const __m512i sc = _mm512_and_si512(scm, m15), mn = _mm512_srli_epi32(scm, 4);
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(ia[t], sc));
          msum[t] = _mm512_add_epi32(
              msum[t], _mm512_mullo_epi32(mn, bcast32(act + lay.corr16(sb, t) + 4 * sub)));
        }
      });
    }
    const __m512 d = load_f16x16(s);
    const __m512 dmin32 = _mm512_mul_ps(load_f16x16(s + 32), _mm512_set1_ps(1.0f / 32));
    for (int t = 0; t < T; ++t) {
      const __m512 dx = bcast_f32(act + lay.d(sb, t));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(dmin32, dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

template <DType kType>
void k_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(
      a, rg0, rg1, tg0, tg1,
      [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows, const uint8_t* end) {
        if constexpr (kType == DType::kQ6_K || kType == DType::kQ3_K) {
          k16_micro<kType, T>(*a.w, g, act, y, a.y_stride, rows, end);
        } else if constexpr (kType == DType::kQ2_K) {
          q2k_micro<T>(*a.w, g, act, y, a.y_stride, rows, end);
        } else {
          k4_micro<kType, T>(*a.w, g, act, y, a.y_stride, rows, end);
        }
      });
}

size_t q8k_bytes(int64_t k) {
  return Q8KActLayout{k / kQKK, kG}.bytes();
}

template <DType kType>
constexpr GemmEntry entry() {
  return {kType, {kG, q8k_bytes, convert_q8k, k_tile<kType>}};
}
constexpr GemmEntry kTable[] = {entry<DType::kQ4_K>(), entry<DType::kQ5_K>(), entry<DType::kQ6_K>(),
                                entry<DType::kQ3_K>(), entry<DType::kQ2_K>()};

}  // namespace
}  // namespace avx512

const GemmKernel* gemm_kquant_avx512(DType t) {
  return find_gemm(avx512::kTable, std::size(avx512::kTable), t);
}

}  // namespace pagoda::cpu
