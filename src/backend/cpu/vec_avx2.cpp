// AVX2 versions: 32 elements per iteration over four accumulators, scalar tail (AVX2 has
// no cheap masked f16 load).
#include <cmath>
#include "backend/cpu/simd_avx2.h"
#include "backend/cpu/vec_impl.h"

namespace pagoda::cpu {
namespace avx2 {
namespace {

inline __m256 load8(const uint16_t* p) {
  return load_f16x8(p);
}
inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
inline float load1(const uint16_t* p) {
  return _cvtsh_ss(*p);
}
inline float load1(const float* p) {
  return *p;
}

template <typename T>
float dot(int64_t n, const T* a, const float* b) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(load8(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(load8(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(load8(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(b + i), s0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  float total = _mm_cvtss_f32(r);
  for (; i < n; ++i) total += load1(a + i) * b[i];
  return total;
}

float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  return dot(n, a, b);
}
float dot_f32(int64_t n, const float* a, const float* b) {
  return dot(n, a, b);
}

template <typename T>
void axpy(int64_t n, float s, const T* x, float* y) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, load8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(s, load1(x + i), y[i]);
}

void axpy_f16_f32(int64_t n, float s, const uint16_t* x, float* y) {
  axpy(n, s, x, y);
}
void axpy_f32(int64_t n, float s, const float* x, float* y) {
  axpy(n, s, x, y);
}

void f32_to_f16_row(int64_t n, const float* x, uint16_t* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = static_cast<uint16_t>(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

void f16_to_f32_row(int64_t n, const uint16_t* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16x8(x + i));
  for (; i < n; ++i) y[i] = _cvtsh_ss(x[i]);
}

// Two passes, the maximum then its first place: both run at load speed, where one pass
// keeping indices per lane would not. Starting from x[0] (not NaN), maxps(x, m) keeps m
// when x is NaN, so the maximum passes NaNs over as the scalar > does.
int64_t argmax_f32(int64_t n, const float* x) {
  if (n <= 1 || std::isnan(x[0])) return 0;
  __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  r = _mm_max_ps(r, _mm_movehl_ps(r, r));
  r = _mm_max_ss(r, _mm_movehdup_ps(r));
  float best = _mm_cvtss_f32(r);
  for (; i < n; ++i)
    if (x[i] > best) best = x[i];
  // == holds for +0 against -0, as > fails between them: the first of either is the answer.
  const __m256 vb = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vb, _CMP_EQ_OQ));
    if (hit) return i + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; i < n; ++i)
    if (x[i] == best) return i;
  return 0;  // not reached: best is one of x
}

constexpr VecFns kFns{dot_f16_f32, axpy_f16_f32, f32_to_f16_row, f16_to_f32_row,
                      dot_f32,     axpy_f32,     argmax_f32};

}  // namespace
}  // namespace avx2

const VecFns& vec_fns_avx2() {
  return avx2::kFns;
}

}  // namespace pagoda::cpu
