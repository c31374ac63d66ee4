// AVX2 kernels for float weights: per column a row group's 16 weights are two registers
// (F16 widened once, BF16 column pairs split by a shift and a mask) reused for every
// token of the group, with each token's activation broadcast once for both. Activations
// use the scalar converter's chunked f32 layout (for BF16 weights rounded to bf16, which
// makes the products exact).
#include <iterator>

#include "backend/cpu/simd_avx2.h"

namespace pagoda::cpu {
namespace avx2 {
namespace {

// 2 x T accumulators, 2 (BF16: 4) weight registers and a broadcast fit 16 registers.
constexpr int kG = 6;
constexpr int kGBf16 = 5;

template <DType kType, int G, int T>
inline void float_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                        int64_t y_stride, int rows) {
  // With few tokens, U columns run in flight on separate accumulators (FMA latency).
  constexpr int U = T >= 3 ? 1 : T == 1 ? 4 : 2;
  constexpr int kStepBytes = kType == DType::kF16 ? 32 : 64;
  const uint8_t* q = w.quants(g, 0);
  const float* x = reinterpret_cast<const float*>(act);
  __m256 acc[U][T][2];
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < T; ++t) acc[u][t][0] = acc[u][t][1] = _mm256_setzero_ps();
  auto step = [&](int64_t b, int u) {
    const uint8_t* qb = q + b * kStepBytes;
    if constexpr (kType == DType::kBF16) {
      const __m256i mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
      const __m256i r0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(qb));
      const __m256i r1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(qb + 32));
      const __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(r0, 16)),
                   o0 = _mm256_castsi256_ps(_mm256_and_si256(r0, mask));
      const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(r1, 16)),
                   o1 = _mm256_castsi256_ps(_mm256_and_si256(r1, mask));
      // Columns 2b and 2b + 1 share a chunk (chunks are even).
      const float* xb = x + chunked_index(2 * b, 0, G);
      for (int t = 0; t < T; ++t) {
        const __m256 xe = _mm256_broadcast_ss(xb + kFloatChunk * t),
                     xo = _mm256_broadcast_ss(xb + kFloatChunk * t + 1);
        acc[u][t][0] = _mm256_fmadd_ps(o0, xo, _mm256_fmadd_ps(e0, xe, acc[u][t][0]));
        acc[u][t][1] = _mm256_fmadd_ps(o1, xo, _mm256_fmadd_ps(e1, xe, acc[u][t][1]));
      }
    } else {
      __m256 w0, w1;
      if constexpr (kType == DType::kF16) {
        w0 = load_f16x8(qb);
        w1 = load_f16x8(qb + 16);
      } else {
        w0 = _mm256_load_ps(reinterpret_cast<const float*>(qb));
        w1 = _mm256_load_ps(reinterpret_cast<const float*>(qb) + 8);
      }
      const float* xb = x + chunked_index(b, 0, G);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_broadcast_ss(xb + kFloatChunk * t);
        acc[u][t][0] = _mm256_fmadd_ps(w0, xv, acc[u][t][0]);
        acc[u][t][1] = _mm256_fmadd_ps(w1, xv, acc[u][t][1]);
      }
    }
  };
  int64_t b = 0;
  for (; b + U <= w.nb; b += U) {
    if constexpr (T <= 2) prefetch(q + kPrefetchBytes + b * kStepBytes, U * kStepBytes);
    unroll<U>([&](auto u) { step(b + u, u); });
  }
  for (; b < w.nb; ++b) step(b, 0);
  for (int t = 0; t < T; ++t) {
    __m256 s0 = acc[0][t][0], s1 = acc[0][t][1];
    for (int u = 1; u < U; ++u) {
      s0 = _mm256_add_ps(s0, acc[u][t][0]);
      s1 = _mm256_add_ps(s1, acc[u][t][1]);
    }
    store_rows(y + t * y_stride, s0, std::min(rows, kHalf));
    if (rows > kHalf) store_rows(y + t * y_stride + kHalf, s1, rows - kHalf);
  }
}

template <DType kType, int G>
void float_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_group_tile<G>(a, rg0, rg1, tg0, tg1,
                         [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows) {
                           float_micro<kType, G, T>(*a.w, g, act, y, a.y_stride, rows);
                         });
}

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
  return {kType, {G, f32_bytes<G>, convert<kRound, G>, float_tile<kType, G>}};
}
constexpr GemmEntry kTable[] = {entry<DType::kF32, FloatRound::kNone, kG>(),
                                entry<DType::kF16, FloatRound::kF16, kG>(),
                                entry<DType::kBF16, FloatRound::kBF16, kGBf16>()};

}  // namespace
}  // namespace avx2

const GemmKernel* gemm_float_avx2(DType t) {
  return find_gemm(avx2::kTable, std::size(avx2::kTable), t);
}

}  // namespace pagoda::cpu
