// Helpers for the *_avx512.cpp translation units only (they are compiled with AVX-512
// flags; keeping these in their own namespace keeps them out of generic code).
#pragma once

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*
// placeholders (GCC bug 105593); it is not about our code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backend/cpu/gemm_kernels.h"

namespace pagoda::cpu::avx512 {

// Calls f(std::integral_constant<int, i>) for i in [0, N), unrolled, so shift counts and
// offsets derived from i are compile-time constants.
template <int N, typename F>
inline void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

// Calls f.template operator()<T>() with T == n, for n in [1, G].
template <int G, typename F>
inline void with_tokens(int n, F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((n == I + 1 ? (f.template operator()<I + 1>(), 0) : 0), ...);
  }
  (std::make_integer_sequence<int, G>{});
}

// Moves bit `from` of every byte to bit `to` (other bits of the result are garbage
// outside `mask`): 16-bit shifts cannot carry a bit across a byte boundary into a
// position the mask keeps.
template <int kFrom, int kTo>
inline __m512i move_bits(__m512i v, __m512i mask) {
  if constexpr (kFrom < kTo) return _mm512_and_si512(_mm512_slli_epi16(v, kTo - kFrom), mask);
  if constexpr (kFrom > kTo) return _mm512_and_si512(_mm512_srli_epi16(v, kFrom - kTo), mask);
  return _mm512_and_si512(v, mask);
}

inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 bcast_f32(const void* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_ps(v);
}

inline __m512 load_f16x16(const void* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// Stores the first `rows` of 16 outputs.
inline void store_rows(float* y, __m512 v, int rows) {
  if (rows == kRowGroup) {
    _mm512_storeu_ps(y, v);
  } else {
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << rows) - 1), v);
  }
}

// One-token products (GEMV) stream the matrix from memory once. They prefetch this far
// ahead of the data they compute on, a distance the out-of-order window alone does not
// reach with the work done per weight line.
// (16 KB measured best of 4-32 KB; every line must be requested, the adjacent-line
// prefetcher does not make up for every other one.)
constexpr int kPrefetchBytes = 16384;
// Prefetches [p, p + bytes), clipped to `end` (a tile's last byte: lines past it belong
// to other tiles, maybe another thread's, and would only add memory traffic).
inline void prefetch(const uint8_t* p, int bytes, const uint8_t* end) {
  const int64_t n = std::min<int64_t>(bytes, end - p);
  for (int64_t off = 0; off < n; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// Runs gemv(group, y_of_group, valid_rows, tile_end) over row groups [rg0, rg1) of a one-token
// product, after prefetching the start of the tile (the kernels prefetch the rest as
// they go).
template <typename Gemv>
inline void for_each_gemv(const GemmArgs& a, int64_t rg0, int64_t rg1, Gemv&& gemv) {
  const uint8_t* end = a.w->quants(rg1, 0);
  prefetch(a.w->quants(rg0, 0), kPrefetchBytes, end);
  for (int64_t g = rg0; g < rg1; ++g)
    gemv(g, a.y + g * kRowGroup,
         static_cast<int>(std::min<int64_t>(kRowGroup, a.w->rows - g * kRowGroup)), end);
}

// For each token group of the tile, instantiates the micro-kernel for its token count T
// and runs it over the tile's row groups: micro.template operator()<T>(row_group, act,
// y_of_row_group_token_0, valid_rows, tile_end).
template <int G, typename Micro>
inline void for_each_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1,
                          Micro&& micro) {
  for (int64_t tg = tg0; tg < tg1; ++tg) {
    const int n = static_cast<int>(std::min<int64_t>(G, a.n_tokens - tg * G));
    const uint8_t* act = a.act + static_cast<size_t>(tg) * a.act_group_bytes;
    float* y = a.y + tg * G * a.y_stride;
    // Few tokens stream the weights (the kernels prefetch ahead from here on).
    const uint8_t* end = a.w->quants(rg1, 0);
    if (n <= 4) prefetch(a.w->quants(rg0, 0), kPrefetchBytes, end);
    with_tokens<G>(n, [&]<int T>() {
      for (int64_t rg = rg0; rg < rg1; ++rg) {
        const int rows = static_cast<int>(std::min<int64_t>(kRowGroup, a.w->rows - rg * kRowGroup));
        micro.template operator()<T>(rg, act, y + rg * kRowGroup, rows, end);
      }
    });
  }
}

}  // namespace pagoda::cpu::avx512
