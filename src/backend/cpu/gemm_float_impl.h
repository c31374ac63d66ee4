// The float-weight GEMM (F32, F16, BF16) written once: its loops over columns and
// tokens, accumulators, prefetch and stores. gemm_float_{avx2,avx512}.cpp each include
// their simd_*.h, define PAGODA_GEMM_NS and include this, so it is compiled per ISA inside
// that ISA's namespace (README: no code built with AVX flags may be shared with generic
// code), and instantiate it over their FloatOps: what a register holds and how one
// column step multiplies, the parts where the ISAs differ.
//
// Ops (FloatOps) provides:
//   V, kRegs                 the register type; registers per row group (16 rows)
//   kPrefetchTokens          token counts up to this stream the weights and prefetch
//   steps_in_flight(T)       columns run on separate accumulators (FMA latency)
//   Weights<kType>, load<kType>(qb)  a step's weights (a column, BF16 a column pair)
//   act_index<kType>(b, G)   f32 element of token 0's activation for step b
//   madd<kType>(acc, w, xt)  acc[kRegs] += the step's weights times token xt's activation
//   zero(), add(a, b), store(y, s, rows), prefetch(p, bytes, end)
//   for_each_tile<G>(args, rg0, rg1, tg0, tg1, micro)  micro<T>(g, act, y, rows, end)
//   fp8_scales(s, out)       FP8: the block's 16 row scales times 256, in kRegs registers
//   fp8_column<kScaled>(qb, sc)  FP8: one column's 16 e4m3 bytes widened (an e4m3fn byte b
//                            is the f16 ((b & 0x7F) << 7) | ((b & 0x80) << 8) times 2^8),
//                            kScaled: times sc, the f32 product e4m3(b) * d (the
//                            reference's weight); fmadd(a, b, c) = a * b + c
//
// FP8 runs the float loops column by column over F32's activations; for several tokens
// each column's weights are scaled by their block's row scales before the FMAs (the
// multiply is shared by the tokens), so every product is the one the F32 matrix of the
// dequantized weights would form; one token sums a block unscaled and scales the sum.
#ifndef PAGODA_GEMM_NS
#error "define PAGODA_GEMM_NS (the ISA namespace) before including gemm_float_impl.h"
#endif

namespace pagoda::cpu::PAGODA_GEMM_NS {
namespace {

// Each token's U partial sums added and stored to its output rows.
template <typename Ops, int U, int T>
inline void store_sums(const typename Ops::V (&acc)[U][T][Ops::kRegs], float* y, int64_t y_stride,
                       int rows) {
  for (int t = 0; t < T; ++t) {
    typename Ops::V s[Ops::kRegs];
    for (int r = 0; r < Ops::kRegs; ++r) {
      s[r] = acc[0][t][r];
      for (int u = 1; u < U; ++u) s[r] = Ops::add(s[r], acc[u][t][r]);
    }
    Ops::store(y + t * y_stride, s, rows);
  }
}

template <typename Ops, DType kType, int G, int T>
inline void float_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                        int64_t y_stride, int rows, const uint8_t* pf_end) {
  using V = typename Ops::V;
  constexpr int R = Ops::kRegs;
  constexpr int U = Ops::steps_in_flight(T);
  constexpr int kStepBytes = kType == DType::kF16 ? 32 : 64;
  const uint8_t* q = w.quants(g, 0);
  const float* x = reinterpret_cast<const float*>(act);
  V acc[U][T][R];
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[u][t][r] = Ops::zero();
  auto step = [&](int64_t b, int u) {
    const auto wv = Ops::template load<kType>(q + b * kStepBytes);
    const float* xb = x + Ops::template act_index<kType>(b, G);
    for (int t = 0; t < T; ++t) Ops::template madd<kType>(acc[u][t], wv, xb + kFloatChunk * t);
  };
  int64_t b = 0;
  for (; b + U <= w.nb; b += U) {
    if constexpr (T <= Ops::kPrefetchTokens)
      Ops::prefetch(q + kPrefetchBytes + b * kStepBytes, U * kStepBytes, pf_end);
    unroll<U>([&](auto u) { step(b + u, u); });
  }
  for (; b < w.nb; ++b) step(b, 0);
  store_sums<Ops, U, T>(acc, y, y_stride, rows);
}

// Column e (0..31) of a 32-column block in the [k/16][G][16] activations, from the
// block's first column.
template <int G>
constexpr int64_t fp8_act_offset(int e) {
  return (e / kFloatChunk) * G * kFloatChunk + e % kFloatChunk;
}

template <typename Ops, int G, int T>
inline void fp8_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                      int64_t y_stride, int rows, const uint8_t* pf_end) {
  using V = typename Ops::V;
  constexpr int R = Ops::kRegs;
  constexpr int U = Ops::steps_in_flight(T);
  static_assert(kQK % U == 0);
  const float* x = reinterpret_cast<const float*>(act);
  V acc[U][T][R];
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[u][t][r] = Ops::zero();
  for (int64_t b = 0; b < w.nb; ++b) {
    const uint8_t* q = w.quants(g, b);
    if constexpr (T <= Ops::kPrefetchTokens) Ops::prefetch(q + kPrefetchBytes, 512, pf_end);
    V sc[R];
    Ops::fp8_scales(w.scales(g, b), sc);
    if constexpr (T == 1) {
      // One token: the block's sum first, then one FMA with its scales (no multiply per
      // column; the same value, rounded in another order).
      V part[U][R];
      for (int u = 0; u < U; ++u)
        for (int r = 0; r < R; ++r) part[u][r] = Ops::zero();
      // Columns 0-15 of the block are chunk 2b of the activations, 16-31 chunk 2b + 1:
      // fully unrolled, every load is a constant offset.
      const float* xb = x + chunked_index(kQK * b, 0, G);
      unroll<kQK>([&](auto e) {
        const auto wv = Ops::template fp8_column<false>(q + 16 * e, sc);
        Ops::template madd<DType::kF32>(part[e % U], wv, xb + fp8_act_offset<G>(e));
      });
      for (int r = 0; r < R; ++r) {
        V s = part[0][r];
        for (int u = 1; u < U; ++u) s = Ops::add(s, part[u][r]);
        acc[0][0][r] = Ops::fmadd(s, sc[r], acc[0][0][r]);
      }
    } else {
      const float* xb = x + chunked_index(kQK * b, 0, G);
      unroll<kQK>([&](auto e) {
        const auto wv = Ops::template fp8_column<true>(q + 16 * e, sc);
        for (int t = 0; t < T; ++t)
          Ops::template madd<DType::kF32>(acc[e % U][t], wv,
                                          xb + fp8_act_offset<G>(e) + kFloatChunk * t);
      });
    }
  }
  store_sums<Ops, U, T>(acc, y, y_stride, rows);
}

template <typename Ops, int G>
void fp8_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  Ops::template for_each_tile<G>(
      a, rg0, rg1, tg0, tg1,
      [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows, const uint8_t* end) {
        fp8_micro<Ops, G, T>(*a.w, g, act, y, a.y_stride, rows, end);
      });
}

template <typename Ops, DType kType, int G>
void float_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  Ops::template for_each_tile<G>(
      a, rg0, rg1, tg0, tg1,
      [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows, const uint8_t* end) {
        float_micro<Ops, kType, G, T>(*a.w, g, act, y, a.y_stride, rows, end);
      });
}

}  // namespace
}  // namespace pagoda::cpu::PAGODA_GEMM_NS

#undef PAGODA_GEMM_NS
