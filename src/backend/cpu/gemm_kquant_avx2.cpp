// AVX2 kernels for Q2_K to Q6_K against Q8_K activations: the AVX-512 scheme (see
// gemm_kquant_avx512.cpp) with vpmaddubsw/vpmaddwd for the byte dots. s16 partial sums
// are widened before they can saturate: after 8 steps for 4-bit values, 4 for 5-bit, 2
// for 6-bit (2 x 63 x 127 per vpmaddubsw lane).
#include <iterator>

#include "backend/cpu/simd_avx2.h"

namespace pagoda::cpu {
namespace avx2 {
namespace {

constexpr int kG = 4;

void convert_q8k(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  const Q8KActLayout lay{cols / kQKK, kG};
  for (int t = 0; t < n; ++t) {
    for (int64_t b = 0; b < lay.ns; ++b) {
      const float* xb = x + t * x_stride + b * kQKK;
      __m256 amax_v = _mm256_setzero_ps();
      for (int i = 0; i < 32; ++i)
        amax_v = _mm256_max_ps(amax_v, abs_ps(_mm256_loadu_ps(xb + 8 * i)));
      const float amax = hmax(amax_v);
      int8_t* qs = reinterpret_cast<int8_t*>(dst + lay.qs(b, t));
      int16_t bsum16[16] = {};
      float d = 0.0f;
      if (amax == 0.0f) {
        std::memset(qs, 0, kQKK);
      } else {
        // The reference keeps the sign of the first element of largest magnitude.
        float max = 0.0f;
        for (int i = 0; i < kQKK; ++i) {
          if ((xb[i] < 0 ? -xb[i] : xb[i]) == amax) {
            max = xb[i];
            break;
          }
        }
        const float iscale = -127.0f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int i = 0; i < 8; ++i) {
          __m256i q[4];
          for (int k = 0; k < 4; ++k)
            q[k] = _mm256_min_epi32(
                _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(xb + 32 * i + 8 * k))),
                _mm256_set1_epi32(127));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * i),
                              pack_i8(q[0], q[1], q[2], q[3]));
          bsum16[2 * i] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
          bsum16[2 * i + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
        }
        d = 1.0f / iscale;
      }
      store_q8k_sums(bsum16, d, lay, b, t, dst);
    }
  }
}

inline __m256i load32(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

template <DType kType, int T>
inline void k4_micro(const WeightMatrix::Impl& w, int64_t g, int h, const uint8_t* act, float* y,
                     int64_t y_stride, int rows) {
  const Q8KActLayout lay{w.nb, kG};
  constexpr int kSubBytes = kType == DType::kQ4_K ? 256 : 320;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10),
                ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < w.nb; ++sb) {
    if constexpr (T <= 2) {
      if (h == 0)
        prefetch(w.quants(g, 0) + kPrefetchBytes + sb * (w.quant_bytes + w.scale_bytes),
                 w.quant_bytes + w.scale_bytes);
    }
    const uint8_t* q = w.quants(g, sb) + 32 * h;
    const uint8_t* s = w.scales(g, sb);
    const uint8_t* xq = act + lay.qs(sb, 0);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qj = q + j * kSubBytes;
      __m256i dot[T], a16[T];
      for (int t = 0; t < T; ++t) dot[t] = a16[t] = _mm256_setzero_si256();
      unroll<4>([&](auto m) {
        const __m256i raw = load32(qj + 64 * m);
        __m256i lo = _mm256_and_si256(raw, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if constexpr (kType == DType::kQ5_K) {
          const __m256i qh = load32(qj + 256);
          lo = _mm256_or_si256(lo, move_bits<m, 4>(qh, m10));
          hi = _mm256_or_si256(hi, move_bits<m + 4, 4>(qh, m10));
        }
        for (int t = 0; t < T; ++t) {
          const uint8_t* xt = xq + kQKK * t + 32 * j;
          a16[t] = _mm256_add_epi16(a16[t], _mm256_maddubs_epi16(lo, bcast32(xt + 4 * m)));
          a16[t] = _mm256_add_epi16(a16[t], _mm256_maddubs_epi16(hi, bcast32(xt + 16 + 4 * m)));
          if (kType == DType::kQ5_K && m % 2 == 1) {
            dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(a16[t], ones));
            a16[t] = _mm256_setzero_si256();
          }
        }
      });
      const __m256i sc = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 64 + 16 * j + 8 * h)));
      for (int t = 0; t < T; ++t) {
        if constexpr (kType == DType::kQ4_K) dot[t] = _mm256_madd_epi16(a16[t], ones);
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dot[t], sc));
      }
    }
    __m256i mins[4];
    for (int p = 0; p < 4; ++p)
      mins[p] = _mm256_cvtepu8_epi16(
          _mm_load_si128(reinterpret_cast<const __m128i*>(s + 192 + 32 * p + 16 * h)));
    const __m256 d = load_f16x8(s + 16 * h), dmin = load_f16x8(s + 32 + 16 * h);
    for (int t = 0; t < T; ++t) {
      const uint8_t* bs = act + lay.bsum32(sb, t);
      __m256i ms = _mm256_madd_epi16(mins[0], bcast32(bs));
      for (int p = 1; p < 4; ++p)
        ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mins[p], bcast32(bs + 4 * p)));
      const __m256 dx = bcast_f32(act + lay.d(sb, t));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, dx), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dmin, dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

// Q6_K and Q3_K: the AVX-512 file's scheme (k16_micro there) on 32-byte halves. s16 sums
// are widened every two steps for 6-bit values (2 x 2 x 63 x 128 < 2^15), once for 3-bit
// ones (4 x 2 x 7 x 128).
template <DType kType, int T>
inline void k16_micro(const WeightMatrix::Impl& w, int64_t g, int h, const uint8_t* act, float* y,
                      int64_t y_stride, int rows) {
  constexpr bool kQ6 = kType == DType::kQ6_K;
  constexpr int kSubBytes = kQ6 ? 384 : 192;
  const Q8KActLayout lay{w.nb, kG};
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30),
                b01 = _mm256_set1_epi8(0x03), b2 = _mm256_set1_epi8(0x04),
                ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < w.nb; ++sb) {
    if constexpr (T <= 2) {
      if (h == 0)
        prefetch(w.quants(g, 0) + kPrefetchBytes + sb * (w.quant_bytes + w.scale_bytes),
                 w.quant_bytes + w.scale_bytes);
    }
    const uint8_t* q = w.quants(g, sb) + 32 * h;
    const uint8_t* s = w.scales(g, sb);
    const uint8_t* xq = act + lay.qs(sb, 0);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qj = q + kSubBytes * j;
      const __m256i top = kQ6 ? _mm256_setzero_si256() : load32(qj + 128);
      unroll<2>([&](auto half) {
        const __m256i line = load32(qj + (kQ6 ? 256 : 0) + 64 * half);
        const int sub = 2 * j + half;
        __m256i dot[T], a16[T];
        for (int t = 0; t < T; ++t) {
          dot[t] = bcast32(act + lay.corr16(sb, t) + 4 * sub);
          if constexpr (!kQ6) dot[t] = _mm256_srai_epi32(dot[t], 3);
          a16[t] = _mm256_setzero_si256();
        }
        unroll<4>([&](auto m) {
          __m256i wv;
          if constexpr (kQ6) {
            const __m256i raw = load32(qj + 64 * m);
            const __m256i nib = half == 0 ? _mm256_and_si256(raw, m4)
                                          : _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            wv = _mm256_or_si256(nib, move_bits<2 * m, 4>(line, m30));
          } else {
            wv = _mm256_or_si256(move_bits<2 * m, 0>(line, b01),
                                 move_bits<4 * half + m, 2>(top, b2));
          }
          for (int t = 0; t < T; ++t) {
            a16[t] = _mm256_add_epi16(
                a16[t],
                _mm256_maddubs_epi16(wv, bcast32(xq + kQKK * t + 32 * j + 16 * half + 4 * m)));
            if (kQ6 ? m % 2 == 1 : m == 3) {
              dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(a16[t], ones));
              a16[t] = _mm256_setzero_si256();
            }
          }
        });
        const __m256i sc = _mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 32 + 16 * sub + 8 * h)));
        for (int t = 0; t < T; ++t)
          isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dot[t], sc));
      });
    }
    const __m256 d = load_f16x8(s + 16 * h);
    for (int t = 0; t < T; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]),
                               _mm256_mul_ps(d, bcast_f32(act + lay.d(sb, t))), acc[t]);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

// Q2_K: the AVX-512 file's scheme (q2k_micro there) on 32-byte halves; four steps of
// 2-bit values stand in s16 (4 x 2 x 3 x 128 < 2^15).
template <int T>
inline void q2k_micro(const WeightMatrix::Impl& w, int64_t g, int h, const uint8_t* act, float* y,
                      int64_t y_stride, int rows) {
  const Q8KActLayout lay{w.nb, kG};
  const __m256i m3 = _mm256_set1_epi8(0x03), m15 = _mm256_set1_epi32(0x0F),
                ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < w.nb; ++sb) {
    if constexpr (T <= 2) {
      if (h == 0)
        prefetch(w.quants(g, 0) + kPrefetchBytes + sb * (w.quant_bytes + w.scale_bytes),
                 w.quant_bytes + w.scale_bytes);
    }
    const uint8_t* q = w.quants(g, sb) + 32 * h;
    const uint8_t* s = w.scales(g, sb);
    const uint8_t* xq = act + lay.qs(sb, 0);
    __m256i isum[T], msum[T];
    for (int t = 0; t < T; ++t) isum[t] = msum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qj = q + 128 * j;
      unroll<2>([&](auto half) {
        const __m256i low = load32(qj + 64 * half);
        const int sub = 2 * j + half;
        __m256i a16[T];
        for (int t = 0; t < T; ++t) a16[t] = _mm256_setzero_si256();
        unroll<4>([&](auto m) {
          const __m256i wv = move_bits<2 * m, 0>(low, m3);
          for (int t = 0; t < T; ++t)
            a16[t] = _mm256_add_epi16(
                a16[t],
                _mm256_maddubs_epi16(wv, bcast32(xq + kQKK * t + 32 * j + 16 * half + 4 * m)));
        });
        const __m256i scm = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 64 + 16 * sub + 8 * h)));
        const __m256i sc = _mm256_and_si256(scm, m15), mn = _mm256_srli_epi32(scm, 4);
        for (int t = 0; t < T; ++t) {
          isum[t] =
              _mm256_add_epi32(isum[t], _mm256_mullo_epi32(_mm256_madd_epi16(a16[t], ones), sc));
          msum[t] = _mm256_add_epi32(
              msum[t], _mm256_mullo_epi32(mn, bcast32(act + lay.corr16(sb, t) + 4 * sub)));
        }
      });
    }
    const __m256 d = load_f16x8(s + 16 * h);
    const __m256 dmin32 = _mm256_mul_ps(load_f16x8(s + 32 + 16 * h), _mm256_set1_ps(1.0f / 32));
    for (int t = 0; t < T; ++t) {
      const __m256 dx = bcast_f32(act + lay.d(sb, t));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, dx), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum[t]), _mm256_mul_ps(dmin32, dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

template <DType kType>
void k_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(a, rg0, rg1, tg0, tg1,
                    [&]<int T>(int64_t g, int h, const uint8_t* act, float* y, int rows) {
                      if constexpr (kType == DType::kQ6_K || kType == DType::kQ3_K) {
                        k16_micro<kType, T>(*a.w, g, h, act, y, a.y_stride, rows);
                      } else if constexpr (kType == DType::kQ2_K) {
                        q2k_micro<T>(*a.w, g, h, act, y, a.y_stride, rows);
                      } else {
                        k4_micro<kType, T>(*a.w, g, h, act, y, a.y_stride, rows);
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
}  // namespace avx2

const GemmKernel* gemm_kquant_avx2(DType t) {
  return find_gemm(avx2::kTable, std::size(avx2::kTable), t);
}

}  // namespace pagoda::cpu
