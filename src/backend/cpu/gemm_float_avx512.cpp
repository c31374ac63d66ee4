// AVX-512 kernels for float weights (F32, F16, BF16, and FP8 widened through f16). One register
// holds one column of 16 rows (F16 widened once by vcvtph2ps and reused for every token of the
// group); each token's activation is a broadcast folded into the FMA. BF16 uses vdpbf16ps on column
// pairs: bf16 x bf16 products are exact in f32, so this matches the widened product. The
// loops are gemm_float_impl.h's.
#include <iterator>

#include "backend/cpu/simd_avx512.h"

#define PAGODA_GEMM_NS avx512
#include "backend/cpu/gemm_float_impl.h"

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

struct FloatOps {
  using V = __m512;
  static constexpr int kRegs = 1;  // a register holds the group's 16 rows
  static constexpr int kPrefetchTokens = 4;
  static constexpr int steps_in_flight(int T) { return T >= 4 ? 1 : T == 1 ? 4 : 2; }

  // One register: a column of the group, or for BF16 a column pair (vdpbf16ps's operand).
  template <DType>
  using Weights = __m512;
  template <DType kType>
  static Weights<kType> load(const uint8_t* qb) {
    if constexpr (kType == DType::kBF16)
      return _mm512_castsi512_ps(_mm512_load_si512(qb));
    else if constexpr (kType == DType::kF16)
      return load_f16x16(qb);
    else
      return _mm512_load_ps(reinterpret_cast<const float*>(qb));
  }
  // BF16 activations are column pairs in one u32 (step b is pair b).
  template <DType>
  static int64_t act_index(int64_t b, int g) {
    return chunked_index(b, 0, g);
  }
  template <DType kType>
  static void madd(V (&acc)[1], const Weights<kType>& w, const float* xt) {
    if constexpr (kType == DType::kBF16)
      acc[0] = _mm512_dpbf16_ps(acc[0], reinterpret_cast<__m512bh>(w),
                                reinterpret_cast<__m512bh>(bcast32(xt)));
    else
      acc[0] = _mm512_fmadd_ps(w, bcast_f32(xt), acc[0]);
  }
  static void fp8_scales(const uint8_t* s, V (&out)[1]) {
    out[0] =
        _mm512_mul_ps(_mm512_load_ps(reinterpret_cast<const float*>(s)), _mm512_set1_ps(256.0f));
  }
  template <bool kScaled>
  static V fp8_column(const uint8_t* qb, const V (&sc)[1]) {
    // Sign-extended, b << 7 has the sign in bits 14 and 15: the mask keeps bit 15.
    const __m256i h = _mm256_and_si256(
        _mm256_slli_epi16(
            _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(qb))), 7),
        _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
    const V w = _mm512_cvtph_ps(h);
    if constexpr (kScaled) return _mm512_mul_ps(w, sc[0]);
    return w;
  }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V zero() { return _mm512_setzero_ps(); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static void store(float* y, const V (&s)[1], int rows) { store_rows(y, s[0], rows); }
  static void prefetch(const uint8_t* p, int bytes, const uint8_t* end) {
    avx512::prefetch(p, bytes, end);
  }
  template <int G, typename Micro>
  static void for_each_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1,
                            Micro&& micro) {
    avx512::for_each_tile<G>(a, rg0, rg1, tg0, tg1, micro);
  }
};

size_t f32_bytes(int64_t k) {
  return chunked_bytes(k, kG);
}
size_t bf16_bytes(int64_t k) {
  return chunked_bytes((k + 1) / 2, kG);
}

constexpr GemmEntry kTable[] = {
    {DType::kF32, {kG, f32_bytes, convert_f32<false>, float_tile<FloatOps, DType::kF32, kG>}},
    {DType::kF16, {kG, f32_bytes, convert_f32<true>, float_tile<FloatOps, DType::kF16, kG>}},
    {DType::kBF16, {kG, bf16_bytes, convert_bf16, float_tile<FloatOps, DType::kBF16, kG>}},
    {DType::kFP8, {kG, f32_bytes, convert_f32<false>, fp8_tile<FloatOps, kG>}}};

}  // namespace
}  // namespace avx512

const GemmKernel* gemm_float_avx512(DType t) {
  return find_gemm(avx512::kTable, std::size(avx512::kTable), t);
}

}  // namespace pagoda::cpu
