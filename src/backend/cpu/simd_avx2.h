// Helpers for the *_avx2.cpp translation units only (compiled with AVX2/FMA/F16C). With
// 8 int32 lanes per register, AVX2 kernels work on half row groups: rows 8h..8h+7 of a
// group are the bytes at offset 32h of each 64-byte line of the packed layout.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backend/cpu/gemm_kernels.h"

namespace pagoda::cpu::avx2 {

constexpr int kHalf = kRowGroup / 2;

template <int N, typename F>
inline void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

template <int G, typename F>
inline void with_tokens(int n, F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((n == I + 1 ? (f.template operator()<I + 1>(), 0) : 0), ...);
  }
  (std::make_integer_sequence<int, G>{});
}

// Products of a few tokens stream the weights from memory once; they prefetch this far
// ahead (the second half-group pass then finds the lines in cache).
constexpr int kPrefetchBytes = 16384;
inline void prefetch(const uint8_t* p, int bytes) {
  for (int off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// Moves bit kFrom of every byte to bit kTo (other bits of the result are garbage outside
// `mask`): 16-bit shifts cannot carry a bit across a byte boundary into a position the
// mask keeps.
template <int kFrom, int kTo>
inline __m256i move_bits(__m256i v, __m256i mask) {
  if constexpr (kFrom < kTo) return _mm256_and_si256(_mm256_slli_epi16(v, kTo - kFrom), mask);
  if constexpr (kFrom > kTo) return _mm256_and_si256(_mm256_srli_epi16(v, kFrom - kTo), mask);
  return _mm256_and_si256(v, mask);
}

inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256 bcast_f32(const void* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_ps(v);
}

inline __m256 load_f16x8(const void* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256 abs_ps(__m256 v) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

// 32 int32 (four registers, values in int8 range) to 32 int8 in order.
inline __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline void store_rows(float* y, __m256 v, int rows) {
  if (rows >= kHalf) {
    _mm256_storeu_ps(y, v);
  } else if (rows > 0) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), idx), v);
  }
}

// Like avx512::for_each_tile, per half row group: micro.template operator()<T>(group,
// half, act, y_of_half_token_0, valid_rows_in_half).
template <int G, typename Micro>
inline void for_each_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1,
                          Micro&& micro) {
  for (int64_t tg = tg0; tg < tg1; ++tg) {
    const int n = static_cast<int>(std::min<int64_t>(G, a.n_tokens - tg * G));
    const uint8_t* act = a.act + static_cast<size_t>(tg) * a.act_group_bytes;
    float* y = a.y + tg * G * a.y_stride;
    with_tokens<G>(n, [&]<int T>() {
      for (int64_t rg = rg0; rg < rg1; ++rg) {
        const int rows = static_cast<int>(std::min<int64_t>(kRowGroup, a.w->rows - rg * kRowGroup));
        micro.template operator()<T>(rg, 0, act, y + rg * kRowGroup, std::min(rows, kHalf));
        if (rows > kHalf)
          micro.template operator()<T>(rg, 1, act, y + rg * kRowGroup + kHalf, rows - kHalf);
      }
    });
  }
}

// The same over whole row groups (kernels that keep both halves in registers):
// micro.template operator()<T>(group, act, y_of_group_token_0, valid_rows).
template <int G, typename Micro>
inline void for_each_group_tile(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0,
                                int64_t tg1, Micro&& micro) {
  for (int64_t tg = tg0; tg < tg1; ++tg) {
    const int n = static_cast<int>(std::min<int64_t>(G, a.n_tokens - tg * G));
    const uint8_t* act = a.act + static_cast<size_t>(tg) * a.act_group_bytes;
    float* y = a.y + tg * G * a.y_stride;
    with_tokens<G>(n, [&]<int T>() {
      for (int64_t rg = rg0; rg < rg1; ++rg) {
        const int rows = static_cast<int>(std::min<int64_t>(kRowGroup, a.w->rows - rg * kRowGroup));
        micro.template operator()<T>(rg, act, y + rg * kRowGroup, rows);
      }
    });
  }
}

}  // namespace pagoda::cpu::avx2
