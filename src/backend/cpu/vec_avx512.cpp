// AVX-512 versions: 64 elements per iteration over four accumulators (FMA latency 4),
// masked loads and stores for the tail instead of a scalar loop.
#include <cmath>

#include "backend/cpu/simd_avx512.h"
#include "backend/cpu/vec_impl.h"

namespace pagoda::cpu {
namespace avx512 {
namespace {

inline __mmask16 tail_mask(int64_t r) {
  return static_cast<__mmask16>(r >= 16 ? 0xFFFF : (1u << r) - 1);
}

inline __m512 load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_f16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
inline __m512 load_f32(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load_f32(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}

template <typename T>
float dot(int64_t n, const T* a, const float* b) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if constexpr (sizeof(T) == 2) {
      s0 = _mm512_fmadd_ps(load_f16(a + i), load_f32(b + i), s0);
      s1 = _mm512_fmadd_ps(load_f16(a + i + 16), load_f32(b + i + 16), s1);
      s2 = _mm512_fmadd_ps(load_f16(a + i + 32), load_f32(b + i + 32), s2);
      s3 = _mm512_fmadd_ps(load_f16(a + i + 48), load_f32(b + i + 48), s3);
    } else {
      s0 = _mm512_fmadd_ps(load_f32(a + i), load_f32(b + i), s0);
      s1 = _mm512_fmadd_ps(load_f32(a + i + 16), load_f32(b + i + 16), s1);
      s2 = _mm512_fmadd_ps(load_f32(a + i + 32), load_f32(b + i + 32), s2);
      s3 = _mm512_fmadd_ps(load_f32(a + i + 48), load_f32(b + i + 48), s3);
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    if constexpr (sizeof(T) == 2) {
      s0 = _mm512_fmadd_ps(load_f16(a + i, m), load_f32(b + i, m), s0);
    } else {
      s0 = _mm512_fmadd_ps(load_f32(a + i, m), load_f32(b + i, m), s0);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  return dot(n, a, b);
}
float dot_f32(int64_t n, const float* a, const float* b) {
  return dot(n, a, b);
}

template <typename T>
void axpy(int64_t n, float s, const T* x, float* y) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512 xv;
    if constexpr (sizeof(T) == 2) {
      xv = load_f16(x + i, m);
    } else {
      xv = load_f32(x + i, m);
    }
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(vs, xv, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void axpy_f16_f32(int64_t n, float s, const uint16_t* x, float* y) {
  axpy(n, s, x, y);
}
void axpy_f32(int64_t n, float s, const float* x, float* y) {
  axpy(n, s, x, y);
}

void f32_to_f16_row(int64_t n, const float* x, uint16_t* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(
        y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
  }
}

void f16_to_f32_row(int64_t n, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, load_f16(x + i, m));
  }
}

// As the AVX2 version (vec_avx2.cpp says why two passes and why NaNs drop out), with
// masked tails: a masked-off lane keeps the running maximum.
int64_t argmax_f32(int64_t n, const float* x) {
  if (n <= 1 || std::isnan(x[0])) return 0;
  __m512 m0 = _mm512_set1_ps(x[0]), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(load_f32(x + i), m0);
    m1 = _mm512_max_ps(load_f32(x + i + 16), m1);
    m2 = _mm512_max_ps(load_f32(x + i + 32), m2);
    m3 = _mm512_max_ps(load_f32(x + i + 48), m3);
  }
  for (; i < n; i += 16) m0 = _mm512_max_ps(_mm512_mask_loadu_ps(m0, tail_mask(n - i), x + i), m0);
  const float best =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
  const __m512 vb = _mm512_set1_ps(best);
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const uint32_t hit =
        _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), vb, _CMP_EQ_OQ);
    if (hit) return i + __builtin_ctz(hit);
  }
  return 0;  // not reached: best is one of x
}

constexpr VecFns kFns{dot_f16_f32, axpy_f16_f32, f32_to_f16_row, f16_to_f32_row,
                      dot_f32,     axpy_f32,     argmax_f32};

}  // namespace
}  // namespace avx512

const VecFns& vec_fns_avx512() {
  return avx512::kFns;
}

}  // namespace pagoda::cpu
