// AVX2 kernels for float weights (and FP8, widened through f16 and scaled per column): per column a
// row group's 16 weights are two registers (F16 widened once, BF16 column pairs split by a shift
// and a mask) reused for every token of the group, with each token's activation broadcast once for
// both. Activations use the scalar converter's chunked f32 layout (for BF16 weights rounded to
// bf16, which makes the products exact). The loops are gemm_float_impl.h's.
#include <iterator>

#include "backend/cpu/simd_avx2.h"

#define PAGODA_GEMM_NS avx2
#include "backend/cpu/gemm_float_impl.h"

namespace pagoda::cpu {
namespace avx2 {
namespace {

// 2 x T accumulators, 2 (BF16: 4) weight registers and a broadcast fit 16 registers.
constexpr int kG = 6;
constexpr int kGBf16 = 5;

struct FloatOps {
  using V = __m256;
  static constexpr int kRegs = 2;  // rows 0-7 and 8-15 of the group
  static constexpr int kPrefetchTokens = 2;
  static constexpr int steps_in_flight(int T) { return T >= 3 ? 1 : T == 1 ? 4 : 2; }

  // BF16: the even (e) and odd (o) columns of a pair, for both halves.
  template <DType kType>
  struct Weights {
    V r[kType == DType::kBF16 ? 4 : 2];
  };
  template <DType kType>
  static Weights<kType> load(const uint8_t* qb) {
    if constexpr (kType == DType::kBF16) {
      const __m256i mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
      const __m256i r0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(qb));
      const __m256i r1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(qb + 32));
      return {{_mm256_castsi256_ps(_mm256_slli_epi32(r0, 16)),
               _mm256_castsi256_ps(_mm256_and_si256(r0, mask)),
               _mm256_castsi256_ps(_mm256_slli_epi32(r1, 16)),
               _mm256_castsi256_ps(_mm256_and_si256(r1, mask))}};
    } else if constexpr (kType == DType::kF16) {
      return {{load_f16x8(qb), load_f16x8(qb + 16)}};
    } else {
      return {{_mm256_load_ps(reinterpret_cast<const float*>(qb)),
               _mm256_load_ps(reinterpret_cast<const float*>(qb) + 8)}};
    }
  }
  // BF16 activations are plain floats: columns 2b and 2b + 1 share a chunk (chunks are even).
  template <DType kType>
  static int64_t act_index(int64_t b, int g) {
    return chunked_index(kType == DType::kBF16 ? 2 * b : b, 0, g);
  }
  template <DType kType>
  static void madd(V (&acc)[2], const Weights<kType>& w, const float* xt) {
    if constexpr (kType == DType::kBF16) {
      const V xe = _mm256_broadcast_ss(xt), xo = _mm256_broadcast_ss(xt + 1);
      acc[0] = _mm256_fmadd_ps(w.r[1], xo, _mm256_fmadd_ps(w.r[0], xe, acc[0]));
      acc[1] = _mm256_fmadd_ps(w.r[3], xo, _mm256_fmadd_ps(w.r[2], xe, acc[1]));
    } else {
      const V xv = _mm256_broadcast_ss(xt);
      acc[0] = _mm256_fmadd_ps(w.r[0], xv, acc[0]);
      acc[1] = _mm256_fmadd_ps(w.r[1], xv, acc[1]);
    }
  }
  static void fp8_scales(const uint8_t* s, V (&out)[2]) {
    const V k256 = _mm256_set1_ps(256.0f);
    out[0] = _mm256_mul_ps(_mm256_load_ps(reinterpret_cast<const float*>(s)), k256);
    out[1] = _mm256_mul_ps(_mm256_load_ps(reinterpret_cast<const float*>(s) + 8), k256);
  }
  template <bool kScaled>
  static Weights<DType::kF32> fp8_column(const uint8_t* qb, const V (&sc)[2]) {
    // Sign-extended, b << 7 has the sign in bits 14 and 15: the mask keeps bit 15.
    const __m256i h = _mm256_and_si256(
        _mm256_slli_epi16(
            _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(qb))), 7),
        _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
    const V lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    const V hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    if constexpr (kScaled) return {{_mm256_mul_ps(lo, sc[0]), _mm256_mul_ps(hi, sc[1])}};
    return {{lo, hi}};
  }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V zero() { return _mm256_setzero_ps(); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void store(float* y, const V (&s)[2], int rows) {
    store_rows(y, s[0], std::min(rows, kHalf));
    if (rows > kHalf) store_rows(y + kHalf, s[1], rows - kHalf);
  }
  // Unclipped: AVX2 tiles do not pass their end along.
  static void prefetch(const uint8_t* p, int bytes, const uint8_t*) { avx2::prefetch(p, bytes); }
  template <int G, typename Micro>
  static void for_each_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1,
                            Micro&& micro) {
    for_each_group_tile<G>(a, rg0, rg1, tg0, tg1,
                           [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows) {
                             micro.template operator()<T>(g, act, y, rows, nullptr);
                           });
  }
};

template <FloatRound kRound, int G>
void convert(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  convert_f32_scalar(x, x_stride, n, cols, G, kRound, dst);
}

template <int G>
size_t f32_bytes(int64_t k) {
  return chunked_bytes(k, G);
}

template <DType kType, FloatRound kRound, int G>
constexpr GemmEntry entry() {
  return {kType, {G, f32_bytes<G>, convert<kRound, G>, float_tile<FloatOps, kType, G>}};
}
constexpr GemmEntry kTable[] = {
    entry<DType::kF32, FloatRound::kNone, kG>(),
    entry<DType::kF16, FloatRound::kF16, kG>(),
    entry<DType::kBF16, FloatRound::kBF16, kGBf16>(),
    {DType::kFP8, {kG, f32_bytes<kG>, convert<FloatRound::kNone, kG>, fp8_tile<FloatOps, kG>}}};

}  // namespace
}  // namespace avx2

const GemmKernel* gemm_float_avx2(DType t) {
  return find_gemm(avx2::kTable, std::size(avx2::kTable), t);
}

}  // namespace pagoda::cpu
