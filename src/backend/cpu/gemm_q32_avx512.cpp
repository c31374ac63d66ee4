// AVX-512 VNNI kernels for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the
// 4-bit table types IQ4_NL, IQ4_XS, MXFP4, NF4, and Q4_G64/Q4_G128's groups of them)
// against Q8 activations. A register holds one
// 4-column step of 16 rows as unsigned bytes; vpdpbusd with the 4 activation bytes of one token
// broadcast from memory gives 16 row partial sums at once. The step loop is outside the token loop
// so each unpacked weight register serves all T tokens, and T independent accumulators hide
// vpdpbusd latency.
#include <iterator>

#include "backend/cpu/simd_avx512.h"

namespace pagoda::cpu {
namespace avx512 {
namespace {

constexpr int kG = 12;  // T int + T float accumulators + weights fit the 32 registers

// Rounding of llama.cpp's x86 activation quantizer (quant_ref.h, quantize_block_q8_act):
// nearest, ties to even, which cvtps2dq does in the default rounding mode.
inline __m512i round_act_epi32(__m512 v) {
  return _mm512_cvtps_epi32(v);
}

// The table types' values + 128 as unsigned bytes, so vpshufb turns nibbles into the
// unsigned operand vpdpbusd wants (corrected by the -128 * sum aux word, as Q8_0).
struct BiasedTable {
  alignas(16) uint8_t v[16];
};
constexpr BiasedTable biased_table(DType t) {
  BiasedTable b{};
  for (int i = 0; i < 16; ++i) b.v[i] = static_cast<uint8_t>(table4_values(t)[i] + 128);
  return b;
}
template <DType kType>
inline __m512i table_register() {
  static constexpr BiasedTable kTable = biased_table(kType);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kTable.v)));
}
// The 16 rows' block scales: f32 for IQ4_XS and MXFP4, f16 for the rest.
template <DType kType>
inline __m512 load_scales(const uint8_t* s) {
  if constexpr (table4_f32_scales(kType))
    return _mm512_load_ps(s);
  else
    return load_f16x16(s);
}

// Index vectors for reduce16: level with output segment size S folds segments of 2S.
struct FoldIndex {
  alignas(64) int32_t lo[16];
  alignas(64) int32_t hi[16];
};
constexpr FoldIndex fold_index(int s) {
  FoldIndex f{};
  const int nseg = 16 / (2 * s);
  for (int p = 0; p < 16; ++p) {
    const int k = p / s, e = p % s;
    const int base = (k < nseg ? 0 : 16) + (k % nseg) * 2 * s;
    f.lo[p] = base + e;
    f.hi[p] = base + s + e;
  }
  return f;
}
constexpr FoldIndex kFold[4] = {fold_index(8), fold_index(4), fold_index(2), fold_index(1)};

// Lane i of the result = op over all lanes of v[i]: 15 combining steps for 16 vectors
// instead of a separate horizontal reduction for each.
template <typename V, typename Op>
inline V reduce16(V* v, Op op) {
  unroll<4>([&](auto level) {
    constexpr int kPairs = 8 >> level;
    const __m512i lo = _mm512_load_si512(kFold[level].lo), hi = _mm512_load_si512(kFold[level].hi);
    unroll<kPairs>([&](auto j) {
      const __m512i a = reinterpret_cast<__m512i>(v[2 * j]),
                    b = reinterpret_cast<__m512i>(v[2 * j + 1]);
      v[j] = op(reinterpret_cast<V>(_mm512_permutex2var_epi32(a, lo, b)),
                reinterpret_cast<V>(_mm512_permutex2var_epi32(a, hi, b)));
    });
  });
  return v[0];
}

// Q8_0/Q8_1 quantization of each token, 16 blocks at a time so the per-block maxima,
// scales and sums are computed across blocks in vector lanes.
// One block on its own (the blocks left over after batches of 16).
template <Q8Aux kAux>
inline void convert_q8_block(const float* xb, const Q8ActLayout& lay, int64_t b, int t,
                             uint8_t* dst) {
  const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.0f;
  const __m512 vid = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  const __m512i q0 = round_act_epi32(_mm512_mul_ps(v0, vid));
  const __m512i q1 = round_act_epi32(_mm512_mul_ps(v1, vid));
  uint8_t* qs = dst + lay.qs(b, t);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtepi32_epi8(q1));
  const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  const float dh = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
  std::memcpy(dst + lay.d(b, t), &dh, 4);
  if constexpr (kAux == Q8Aux::kS) {
    const float s = _cvtsh_ss(_cvtss_sh(static_cast<float>(sum) * d, _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(dst + lay.aux(b, t), &s, 4);
  } else {
    const int32_t c = sum * (kAux == Q8Aux::kSumTimesMinus8 ? -8 : -128);
    std::memcpy(dst + lay.aux(b, t), &c, 4);
  }
}

template <Q8Aux kAux>
void convert_q8(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst) {
  const Q8ActLayout lay{cols / kQK, kG};
  for (int t = 0; t < n; ++t) {
    const float* xt = x + t * x_stride;
    int64_t b0 = 0;
    for (; b0 + 16 <= lay.nb; b0 += 16) {
      constexpr int nbb = 16;
      const float* xb = xt + b0 * kQK;
      __m512 m[16];
      for (int i = 0; i < 16; ++i) {
        m[i] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + kQK * i)),
                             _mm512_abs_ps(_mm512_loadu_ps(xb + kQK * i + 16)));
      }
      const __m512 amax = reduce16(m, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); });
      const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
      const __mmask16 nz = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_OQ);
      alignas(64) float id[16];  // 127 / amax, as llama.cpp's x86 quantizer computes it
      _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), amax));
      __m512i sums[16];
      for (int i = 0; i < 16; ++i) {
        const __m512 vid = _mm512_set1_ps(id[i]);
        const __m512i q0 = round_act_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + kQK * i), vid));
        const __m512i q1 = round_act_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + kQK * i + 16), vid));
        uint8_t* qs = dst + lay.qs(b0 + i, t);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtepi32_epi8(q1));
        sums[i] = _mm512_add_epi32(q0, q1);
      }
      const __m512i sum =
          reduce16(sums, [](__m512i a, __m512i b) { return _mm512_add_epi32(a, b); });
      alignas(64) float dh[16];
      alignas(64) int32_t aux[16];
      _mm512_store_ps(dh, _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT)));
      if constexpr (kAux == Q8Aux::kS) {
        const __m512 sv = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), d);
        _mm512_store_ps(reinterpret_cast<float*>(aux),
                        _mm512_cvtph_ps(_mm512_cvtps_ph(sv, _MM_FROUND_TO_NEAREST_INT)));
      } else {
        _mm512_store_si512(
            aux,
            _mm512_mullo_epi32(sum, _mm512_set1_epi32(kAux == Q8Aux::kSumTimesMinus8 ? -8 : -128)));
      }
      for (int i = 0; i < nbb; ++i) {
        std::memcpy(dst + lay.d(b0 + i, t), &dh[i], 4);
        std::memcpy(dst + lay.aux(b0 + i, t), &aux[i], 4);
      }
    }
    for (; b0 < lay.nb; ++b0) convert_q8_block<kAux>(xt + b0 * kQK, lay, b0, t, dst);
  }
}

template <DType kType, int T>
inline void q32_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                      int64_t y_stride, int rows, const uint8_t* pf_end) {
  const Q8ActLayout lay{w.nb, kG};
  constexpr bool kQ5 = kType == DType::kQ5_0 || kType == DType::kQ5_1;
  constexpr bool kMin = kType == DType::kQ4_1 || kType == DType::kQ5_1;  // + m * s
  constexpr int kQuantBytes = kType == DType::kQ8_0 ? 512 : kQ5 ? 320 : 256;
  constexpr int kScaleBytes = kMin || table4_f32_scales(kType) ? 64 : 32;
  // With few tokens, split each token's 8 dependent vpdpbusd over P accumulators.
  constexpr int P = T == 1 ? 4 : T == 2 ? 2 : 1;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
  [[maybe_unused]] __m512i table = _mm512_setzero_si512();
  if constexpr (is_table4(kType)) table = table_register<kType>();
  const uint8_t* qb = w.quants(g, 0);
  const uint8_t* sb = w.scales(g, 0);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < w.nb; ++b) {
    const uint8_t* q = qb + b * kQuantBytes;
    const uint8_t* s = sb + b * kScaleBytes;
    const uint8_t* xq = act + lay.qs(b, 0);
    const uint8_t* aux = act + lay.aux(b, 0);
    const uint8_t* dx = act + lay.d(b, 0);
    // A few tokens still stream the weights from memory (see q32_gemv).
    if constexpr (T <= 4)
      prefetch(qb + kPrefetchBytes + b * (kQuantBytes + kScaleBytes), kQuantBytes + kScaleBytes,
               pf_end);
    __m512i ia[P][T];
    for (int t = 0; t < T; ++t) {
      // Q4_0/Q8_0 start from the offset correction so the sum comes out signed; Q5_0's
      // offset is 16, twice Q4_0's, whose activations it shares.
      ia[0][t] = kMin                    ? _mm512_setzero_si512()
                 : kType == DType::kQ5_0 ? _mm512_slli_epi32(bcast32(aux + 4 * t), 1)
                                         : bcast32(aux + 4 * t);
      for (int p = 1; p < P; ++p) ia[p][t] = _mm512_setzero_si512();
    }
    if constexpr (kType == DType::kQ8_0) {
      unroll<8>([&](auto st) {
        const __m512i wv = _mm512_load_si512(q + 64 * st);
        for (int t = 0; t < T; ++t)
          ia[st % P][t] = _mm512_dpbusd_epi32(ia[st % P][t], wv, bcast32(xq + 32 * t + 4 * st));
      });
    } else {
      unroll<4>([&](auto m) {
        const __m512i raw = _mm512_load_si512(q + 64 * m);
        __m512i lo = _mm512_and_si512(raw, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        if constexpr (kQ5) {
          // Byte bit s is the fifth bit of column 4s + e: steps m and m + 4 here.
          const __m512i qh = _mm512_load_si512(q + 256);
          lo = _mm512_or_si512(lo, move_bits<m, 4>(qh, m10));
          hi = _mm512_or_si512(hi, move_bits<m + 4, 4>(qh, m10));
        }
        if constexpr (is_table4(kType)) {
          lo = _mm512_shuffle_epi8(table, lo);
          hi = _mm512_shuffle_epi8(table, hi);
        }
        for (int t = 0; t < T; ++t) {
          ia[(2 * m) % P][t] =
              _mm512_dpbusd_epi32(ia[(2 * m) % P][t], lo, bcast32(xq + 32 * t + 4 * m));
          ia[(2 * m + 1) % P][t] =
              _mm512_dpbusd_epi32(ia[(2 * m + 1) % P][t], hi, bcast32(xq + 32 * t + 16 + 4 * m));
        }
      });
    }
    const __m512 dw = load_scales<kType>(s);
    for (int t = 0; t < T; ++t) {
      __m512i sum = ia[0][t];
      for (int p = 1; p < P; ++p) sum = _mm512_add_epi32(sum, ia[p][t]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, bcast_f32(dx + 4 * t)),
                               acc[t]);
    }
    if constexpr (kMin) {
      const __m512 mw = load_f16x16(s + 32);
      for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(mw, bcast_f32(aux + 4 * t), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

// One token against one row group. High nibbles are masked in place (16x their value),
// summed apart and divided by 16 exactly, which saves a shift per register; together
// with the prefetch this keeps loads running far ahead of the arithmetic. (Walking
// several row groups at once shares the activation broadcasts but splits the memory
// stream, which measured 2x slower from DRAM.)
template <DType kType>
inline void q32_gemv(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y, int rows,
                     const uint8_t* pf_end) {
  const Q8ActLayout lay{w.nb, kG};
  constexpr bool kQ5 = kType == DType::kQ5_0 || kType == DType::kQ5_1;
  constexpr bool kMin = kType == DType::kQ4_1 || kType == DType::kQ5_1;  // + m * s
  constexpr int kQuantBytes = kType == DType::kQ8_0 ? 512 : kQ5 ? 320 : 256;
  constexpr int kScaleBytes = kMin || table4_f32_scales(kType) ? 64 : 32;
  [[maybe_unused]] __m512i table = _mm512_setzero_si512();
  if constexpr (is_table4(kType)) table = table_register<kType>();
  const __m512i m4 = _mm512_set1_epi8(0x0F), mf0 = _mm512_set1_epi8(static_cast<char>(0xF0)),
                m10 = _mm512_set1_epi8(0x10);
  __m512 acc = _mm512_setzero_ps();
  const uint8_t* pf = w.quants(g, 0) + kPrefetchBytes;
  for (int64_t b = 0; b < w.nb; ++b) {
    prefetch(pf, kQuantBytes + kScaleBytes, pf_end);
    pf += kQuantBytes + kScaleBytes;
    const uint8_t* xq = act + lay.qs(b, 0);
    const uint8_t* q = w.quants(g, b);
    const uint8_t* s = w.scales(g, b);
    __m512i lo = kMin                    ? _mm512_setzero_si512()
                 : kType == DType::kQ5_0 ? _mm512_slli_epi32(bcast32(act + lay.aux(b, 0)), 1)
                                         : bcast32(act + lay.aux(b, 0));
    __m512i hi = _mm512_setzero_si512();
    if constexpr (kQ5) {
      // Five bits do not fit the masked-in-place trick below: plain nibbles plus the bit.
      const __m512i qh = _mm512_load_si512(q + 256);
      unroll<4>([&](auto m) {
        const __m512i raw = _mm512_load_si512(q + 64 * m);
        const __m512i l = _mm512_or_si512(_mm512_and_si512(raw, m4), move_bits<m, 4>(qh, m10));
        const __m512i h = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), m4),
                                          move_bits<m + 4, 4>(qh, m10));
        lo = _mm512_dpbusd_epi32(lo, l, bcast32(xq + 4 * m));
        hi = _mm512_dpbusd_epi32(hi, h, bcast32(xq + 16 + 4 * m));
      });
    } else if constexpr (is_table4(kType)) {
      unroll<4>([&](auto m) {
        const __m512i raw = _mm512_load_si512(q + 64 * m);
        const __m512i l = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, m4));
        const __m512i h =
            _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
        lo = _mm512_dpbusd_epi32(lo, l, bcast32(xq + 4 * m));
        hi = _mm512_dpbusd_epi32(hi, h, bcast32(xq + 16 + 4 * m));
      });
    } else if constexpr (kType == DType::kQ8_0) {
      unroll<8>([&](auto st) {
        __m512i& a = st % 2 == 0 ? lo : hi;
        a = _mm512_dpbusd_epi32(a, _mm512_load_si512(q + 64 * st), bcast32(xq + 4 * st));
      });
    } else {
      unroll<4>([&](auto m) {
        const __m512i raw = _mm512_load_si512(q + 64 * m);
        lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(raw, m4), bcast32(xq + 4 * m));
        hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(raw, mf0), bcast32(xq + 16 + 4 * m));
      });
      hi = _mm512_srai_epi32(hi, 4);
    }
    const __m512 dx = bcast_f32(act + lay.d(b, 0));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)),
                          _mm512_mul_ps(load_scales<kType>(s), dx), acc);
    if constexpr (kMin)
      acc = _mm512_fmadd_ps(load_f16x16(s + 32), bcast_f32(act + lay.aux(b, 0)), acc);
  }
  store_rows(y, acc, rows);
}

// Q4_G64/Q4_G128: S sub-blocks of Q4_1's nibble loop under one scale, each sub-block's
// integer dot starting from -z * sum(x) (gemm_generic.cpp tile_q4g): the sum from the
// -8 * sum aux word shifted right by 3, times z (the low half of each 32-bit lane, the
// high half 0) in one vpmaddwd.
template <int S, int T>
inline void q4g_micro(const WeightMatrix::Impl& w, int64_t g, const uint8_t* act, float* y,
                      int64_t y_stride, int rows, const uint8_t* pf_end) {
  const Q8ActLayout lay{w.nb * S, kG};
  constexpr int kQuantBytes = 256 * S, kScaleBytes = 64;
  constexpr int P = T == 1 ? 4 : T == 2 ? 2 : 1;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const uint8_t* qb = w.quants(g, 0);
  const uint8_t* sb = w.scales(g, 0);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < w.nb; ++b) {
    if constexpr (T <= 4)
      prefetch(qb + kPrefetchBytes + b * (kQuantBytes + kScaleBytes), kQuantBytes + kScaleBytes,
               pf_end);
    const uint8_t* s = sb + b * kScaleBytes;
    const __m512 dw = load_f16x16(s);
    const __m512i z =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32)));
    for (int j = 0; j < S; ++j) {
      const int64_t sj = S * b + j;
      const uint8_t* q = qb + b * kQuantBytes + 256 * j;
      const uint8_t* xq = act + lay.qs(sj, 0);
      __m512i ia[P][T];
      for (int t = 0; t < T; ++t) {
        ia[0][t] = _mm512_madd_epi16(z, _mm512_srai_epi32(bcast32(act + lay.aux(sj, t)), 3));
        for (int p = 1; p < P; ++p) ia[p][t] = _mm512_setzero_si512();
      }
      unroll<4>([&](auto m) {
        const __m512i raw = _mm512_load_si512(q + 64 * m);
        const __m512i lo = _mm512_and_si512(raw, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        for (int t = 0; t < T; ++t) {
          ia[(2 * m) % P][t] =
              _mm512_dpbusd_epi32(ia[(2 * m) % P][t], lo, bcast32(xq + 32 * t + 4 * m));
          ia[(2 * m + 1) % P][t] =
              _mm512_dpbusd_epi32(ia[(2 * m + 1) % P][t], hi, bcast32(xq + 32 * t + 16 + 4 * m));
        }
      });
      for (int t = 0; t < T; ++t) {
        __m512i sum = ia[0][t];
        for (int p = 1; p < P; ++p) sum = _mm512_add_epi32(sum, ia[p][t]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                 _mm512_mul_ps(dw, bcast_f32(act + lay.d(sj, t))), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], rows);
}

template <int S>
void q4g_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  for_each_tile<kG>(
      a, rg0, rg1, tg0, tg1,
      [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows, const uint8_t* end) {
        q4g_micro<S, T>(*a.w, g, act, y, a.y_stride, rows, end);
      });
}

template <DType kType>
void q32_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  if (a.n_tokens == 1) {
    for_each_gemv(a, rg0, rg1, [&](int64_t g, float* y, int rows, const uint8_t* end) {
      q32_gemv<kType>(*a.w, g, a.act, y, rows, end);
    });
    return;
  }
  for_each_tile<kG>(
      a, rg0, rg1, tg0, tg1,
      [&]<int T>(int64_t g, const uint8_t* act, float* y, int rows, const uint8_t* end) {
        q32_micro<kType, T>(*a.w, g, act, y, a.y_stride, rows, end);
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
}  // namespace avx512

const GemmKernel* gemm_q32_avx512(DType t) {
  return find_gemm(avx512::kTable, std::size(avx512::kTable), t);
}

}  // namespace pagoda::cpu
