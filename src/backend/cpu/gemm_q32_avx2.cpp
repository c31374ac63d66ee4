// AVX2 kernels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the 4-bit table types (IQ4_NL, IQ4_XS,
// MXFP4, NF4) and the grouped Q4_G64/Q4_G128 against Q8 activations. Without VNNI the byte dot is
// vpmaddubsw (u8 x s8 -> saturating s16 pairs) then vpmaddwd by ones. Nibbles (<= 15)
// times int8 stay far from saturation, so all 8 steps of a block are summed in s16
// first; Q8_0 weights use the sign trick (|w| x sign(x, w)) and widen every step, and so do
// the table types once vpshufb has turned their nibbles into signed table values.
#include <iterator>

#include "backend/cpu/simd_avx2.h"

namespace pagoda::cpu {
namespace avx2 {
namespace {

constexpr int kG = 4;

// Rounding of llama.cpp's x86 activation quantizer (quant_ref.h, quantize_block_q8_act):
// nearest, ties to even, which cvtps2dq does in the default rounding mode.
inline __m256i round_act_epi32(__m256 v) {
  return _mm256_cvtps_epi32(v);
}

template <Q8Aux kAux>
void convert_q8(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  const Q8ActLayout lay{cols / kQK, kG};
  for (int t = 0; t < n; ++t) {
    const float* xt = x + t * x_stride;
    for (int64_t b = 0; b < lay.nb; ++b) {
      __m256 v[4];
      __m256 amax_v = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xt + b * kQK + 8 * i);
        amax_v = _mm256_max_ps(amax_v, abs_ps(v[i]));
      }
      const float amax = hmax(amax_v);
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = round_act_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + lay.qs(b, t)),
                          pack_i8(q[0], q[1], q[2], q[3]));
      const int sum =
          hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
      const float dh = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
      std::memcpy(dst + lay.d(b, t), &dh, 4);
      if constexpr (kAux == Q8Aux::kS) {
        const float s =
            _cvtsh_ss(_cvtss_sh(static_cast<float>(sum) * d, _MM_FROUND_TO_NEAREST_INT));
        std::memcpy(dst + lay.aux(b, t), &s, 4);
      } else {
        const int32_t c = sum * (kAux == Q8Aux::kSumTimesMinus8 ? -8 : -128);
        std::memcpy(dst + lay.aux(b, t), &c, 4);
      }
    }
  }
}

template <DType kType, int T>
inline void q32_micro(const WeightMatrix::Impl& w, int64_t g, int h, const uint8_t* act, float* y,
                      int64_t y_stride, int rows) {
  const Q8ActLayout lay{w.nb, kG};
  constexpr bool kQ5 = kType == DType::kQ5_0 || kType == DType::kQ5_1;
  constexpr bool kMin = kType == DType::kQ4_1 || kType == DType::kQ5_1;  // + m * s
  constexpr bool kF32Scales = table4_f32_scales(kType);
  constexpr int kQuantBytes = kType == DType::kQ8_0 ? 512 : kQ5 ? 320 : 256;
  constexpr int kScaleBytes = kMin || kF32Scales ? 64 : 32;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* qb = w.quants(g, 0) + 32 * h;
  const uint8_t* sb = w.scales(g, 0) + (kF32Scales ? 32 : 16) * h;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < w.nb; ++b) {
    if constexpr (T <= 2) {
      if (h == 0)
        prefetch(w.quants(g, 0) + kPrefetchBytes + b * (kQuantBytes + kScaleBytes),
                 kQuantBytes + kScaleBytes);
    }
    const uint8_t* q = qb + b * kQuantBytes;
    const uint8_t* s = sb + b * kScaleBytes;
    const uint8_t* xq = act + lay.qs(b, 0);
    const uint8_t* aux = act + lay.aux(b, 0);
    __m256i dot[T];
    if constexpr (kType == DType::kQ8_0) {
      // The dot is signed here, so the -128 * sum correction is not needed.
      for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
      unroll<8>([&](auto st) {
        const __m256i ws =
            _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64 * st)),
                             _mm256_set1_epi8(static_cast<char>(0x80)));
        const __m256i wa = _mm256_abs_epi8(ws);
        for (int t = 0; t < T; ++t) {
          const __m256i p =
              _mm256_maddubs_epi16(wa, _mm256_sign_epi8(bcast32(xq + 32 * t + 4 * st), ws));
          dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(p, ones));
        }
      });
    } else if constexpr (is_table4(kType)) {
      const __m256i table = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(table4_values(kType))));
      for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
      unroll<4>([&](auto m) {
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64 * m));
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, m4));
        const __m256i hi =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
        const __m256i lo_abs = _mm256_abs_epi8(lo), hi_abs = _mm256_abs_epi8(hi);
        for (int t = 0; t < T; ++t) {
          // |w| <= 127 times |x| <= 127, two to a pair: below s16 saturation.
          const __m256i pl =
              _mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(bcast32(xq + 32 * t + 4 * m), lo));
          const __m256i ph =
              _mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(bcast32(xq + 32 * t + 16 + 4 * m), hi));
          dot[t] = _mm256_add_epi32(
              dot[t], _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones)));
        }
      });
    } else {
      // s16 sums of 4-bit values stand all four steps (8 x 2 x 15 x 128 < 2^15); 5-bit
      // ones are widened every two.
      __m256i a16[T];
      for (int t = 0; t < T; ++t) {
        a16[t] = _mm256_setzero_si256();
        dot[t] = _mm256_setzero_si256();
      }
      unroll<4>([&](auto m) {
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64 * m));
        __m256i lo = _mm256_and_si256(raw, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if constexpr (kQ5) {
          const __m256i qh = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 256));
          lo = _mm256_or_si256(lo, move_bits<m, 4>(qh, m10));
          hi = _mm256_or_si256(hi, move_bits<m + 4, 4>(qh, m10));
        }
        for (int t = 0; t < T; ++t) {
          a16[t] = _mm256_add_epi16(a16[t], _mm256_maddubs_epi16(lo, bcast32(xq + 32 * t + 4 * m)));
          a16[t] =
              _mm256_add_epi16(a16[t], _mm256_maddubs_epi16(hi, bcast32(xq + 32 * t + 16 + 4 * m)));
          if (kQ5 ? m % 2 == 1 : m == 3) {
            dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(a16[t], ones));
            a16[t] = _mm256_setzero_si256();
          }
        }
      });
      for (int t = 0; t < T; ++t) {
        if constexpr (kType == DType::kQ4_0)
          dot[t] = _mm256_add_epi32(dot[t], bcast32(aux + 4 * t));
        if constexpr (kType == DType::kQ5_0)  // offset 16: twice Q4_0's correction
          dot[t] = _mm256_add_epi32(dot[t], _mm256_slli_epi32(bcast32(aux + 4 * t), 1));
      }
    }
    __m256 dw;
    if constexpr (kF32Scales)
      dw = _mm256_load_ps(reinterpret_cast<const float*>(s));
    else
      dw = load_f16x8(s);
    for (int t = 0; t < T; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]),
                               _mm256_mul_ps(dw, bcast_f32(act + lay.d(b, t))), acc[t]);
    if constexpr (kMin) {
      const __m256 mw = load_f16x8(s + 32);
      for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(mw, bcast_f32(aux + 4 * t), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

// Q4_G64/Q4_G128: S sub-blocks of Q4_1's nibble loop under one scale, the zero point
// taken off each sub-block's integer dot as z * sum(x) (gemm_generic.cpp tile_q4g). The
// sum comes from the -8 * sum aux word shifted right by 3; vpmaddwd with z as the low
// half of each 32-bit lane (the high half 0) gives -z * sum in one step.
template <int S, int T>
inline void q4g_micro(const WeightMatrix::Impl& w, int64_t g, int h, const uint8_t* act, float* y,
                      int64_t y_stride, int rows) {
  const Q8ActLayout lay{w.nb * S, kG};
  constexpr int kQuantBytes = 256 * S, kScaleBytes = 64;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* qb = w.quants(g, 0) + 32 * h;
  const uint8_t* sb = w.scales(g, 0);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < w.nb; ++b) {
    if constexpr (T <= 2) {
      if (h == 0)
        prefetch(w.quants(g, 0) + kPrefetchBytes + b * (kQuantBytes + kScaleBytes),
                 kQuantBytes + kScaleBytes);
    }
    const uint8_t* s = sb + b * kScaleBytes;
    const __m256 dw = load_f16x8(s + 16 * h);
    const __m256i z =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 32 + 8 * h)));
    for (int j = 0; j < S; ++j) {
      const int64_t sj = S * b + j;
      const uint8_t* q = qb + b * kQuantBytes + 256 * j;
      const uint8_t* xq = act + lay.qs(sj, 0);
      __m256i a16[T];
      for (int t = 0; t < T; ++t) a16[t] = _mm256_setzero_si256();
      unroll<4>([&](auto m) {
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64 * m));
        const __m256i lo = _mm256_and_si256(raw, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        for (int t = 0; t < T; ++t) {
          // s16 sums of 4-bit values stand all four steps (8 x 2 x 15 x 128 < 2^15).
          a16[t] = _mm256_add_epi16(a16[t], _mm256_maddubs_epi16(lo, bcast32(xq + 32 * t + 4 * m)));
          a16[t] =
              _mm256_add_epi16(a16[t], _mm256_maddubs_epi16(hi, bcast32(xq + 32 * t + 16 + 4 * m)));
        }
      });
      for (int t = 0; t < T; ++t) {
        const __m256i minus_sum = _mm256_srai_epi32(bcast32(act + lay.aux(sj, t)), 3);
        const __m256i dot =
            _mm256_add_epi32(_mm256_madd_epi16(a16[t], ones), _mm256_madd_epi16(z, minus_sum));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                 _mm256_mul_ps(dw, bcast_f32(act + lay.d(sj, t))), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

template <int S>
void q4g_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(a, rg0, rg1, tg0, tg1,
                    [&]<int T>(int64_t g, int h, const uint8_t* act, float* y, int rows) {
                      q4g_micro<S, T>(*a.w, g, h, act, y, a.y_stride, rows);
                    });
}

template <DType kType>
void q32_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(a, rg0, rg1, tg0, tg1,
                    [&]<int T>(int64_t g, int h, const uint8_t* act, float* y, int rows) {
                      q32_micro<kType, T>(*a.w, g, h, act, y, a.y_stride, rows);
                    });
}

size_t q8_bytes(int64_t k) {
  return Q8ActLayout{k / kQK, kG}.bytes();
}

template <DType kType>
constexpr GemmEntry entry() {
  return {kType, {kG, q8_bytes, convert_q8<q8_aux_of(kType)>, q32_tile<kType>}};
}
constexpr GemmEntry kTable[] = {
    entry<DType::kQ4_0>(),
    entry<DType::kQ4_1>(),
    entry<DType::kQ8_0>(),
    entry<DType::kQ5_0>(),
    entry<DType::kQ5_1>(),
    entry<DType::kIQ4_NL>(),
    entry<DType::kIQ4_XS>(),
    entry<DType::kMXFP4>(),
    entry<DType::kNF4>(),
    {DType::kQ4_G64, {kG, q8_bytes, convert_q8<Q8Aux::kSumTimesMinus8>, q4g_tile<2>}},
    {DType::kQ4_G128, {kG, q8_bytes, convert_q8<Q8Aux::kSumTimesMinus8>, q4g_tile<4>}}};

}  // namespace
}  // namespace avx2

const GemmKernel* gemm_q32_avx2(DType t) {
  return find_gemm(avx2::kTable, std::size(avx2::kTable), t);
}

}  // namespace pagoda::cpu
