// AVX2 kernels for float weights, per half row group: one register holds one column of 8
// rows (F16 widened once per column, BF16 column pairs split by a shift and a mask) and
// is reused for every token of the group. Activations use the scalar converter's chunked
// f32 layout (for BF16 weights rounded to bf16, which makes the products exact).
#include "backend/cpu/simd_avx2.h"

namespace pagoda::cpu {
namespace avx2 {
namespace {

constexpr int kG = 8;

template <DType kType, int T>
inline void float_micro(const WeightMatrix::Impl& w, int64_t g, int h, const uint8_t* act, float* y,
                        int64_t y_stride, int rows) {
  constexpr int U = T >= 4 ? 1 : T == 1 ? 4 : 2;
  constexpr int kStepBytes = kType == DType::kF16 ? 32 : 64;
  const uint8_t* q = w.quants(g, 0) + kStepBytes / 2 * h;
  const float* x = reinterpret_cast<const float*>(act);
  __m256 acc[U][T];
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < T; ++t) acc[u][t] = _mm256_setzero_ps();
  auto step = [&](int64_t b, int u) {
    const uint8_t* qb = q + b * kStepBytes;
    if constexpr (kType == DType::kBF16) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(qb));
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
      const __m256 odd = _mm256_castsi256_ps(
          _mm256_and_si256(raw, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
      // Columns 2b and 2b + 1 share a chunk (chunks are even).
      const float* xb = x + chunked_index(2 * b, 0, kG);
      for (int t = 0; t < T; ++t) {
        acc[u][t] = _mm256_fmadd_ps(even, _mm256_broadcast_ss(xb + kFloatChunk * t), acc[u][t]);
        acc[u][t] = _mm256_fmadd_ps(odd, _mm256_broadcast_ss(xb + kFloatChunk * t + 1), acc[u][t]);
      }
    } else {
      __m256 wv;
      if constexpr (kType == DType::kF16) {
        wv = load_f16x8(qb);
      } else {
        wv = _mm256_load_ps(reinterpret_cast<const float*>(qb));
      }
      const float* xb = x + chunked_index(b, 0, kG);
      for (int t = 0; t < T; ++t)
        acc[u][t] = _mm256_fmadd_ps(wv, _mm256_broadcast_ss(xb + kFloatChunk * t), acc[u][t]);
    }
  };
  int64_t b = 0;
  for (; b + U <= w.nb; b += U) {
    if constexpr (T <= 2) {
      if (h == 0) prefetch(w.quants(g, 0) + kPrefetchBytes + b * kStepBytes, U * kStepBytes);
    }
    unroll<U>([&](auto u) { step(b + u, u); });
  }
  for (; b < w.nb; ++b) step(b, 0);
  for (int t = 0; t < T; ++t) {
    __m256 s = acc[0][t];
    for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[u][t]);
    store_rows(y + t * y_stride, s, rows);
  }
}

template <DType kType>
void float_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(a, rg0, rg1, tg0, tg1,
                    [&]<int T>(int64_t g, int h, const uint8_t* act, float* y, int rows) {
                      float_micro<kType, T>(*a.w, g, h, act, y, a.y_stride, rows);
                    });
}

template <FloatRound kRound>
void convert(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  convert_f32_scalar(x, x_stride, n, cols, kG, kRound, dst);
}

size_t f32_bytes(int64_t k) {
  return chunked_bytes(k, kG);
}

constexpr GemmKernel kF32{kG, f32_bytes, convert<FloatRound::kNone>, float_tile<DType::kF32>};
constexpr GemmKernel kF16{kG, f32_bytes, convert<FloatRound::kF16>, float_tile<DType::kF16>};
constexpr GemmKernel kBF16{kG, f32_bytes, convert<FloatRound::kBF16>, float_tile<DType::kBF16>};

}  // namespace
}  // namespace avx2

const GemmKernel* gemm_float_avx2(DType t) {
  switch (t) {
    case DType::kF32:
      return &avx2::kF32;
    case DType::kF16:
      return &avx2::kF16;
    case DType::kBF16:
      return &avx2::kBF16;
    default:
      return nullptr;
  }
}

}  // namespace pagoda::cpu
