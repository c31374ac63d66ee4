// Portable versions: eight partial sums so the loop carries no single long dependency.
#include "backend/cpu/vec_impl.h"
#include "core/dtype.h"

namespace pagoda::cpu {
namespace {

template <typename Load>
float dot(int64_t n, Load a, const float* b) {
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += a(i + k) * b[i + k];
  for (; i < n; ++i) s[0] += a(i) * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  return dot(
      n, [a](int64_t i) { return fp16_to_f32(a[i]); }, b);
}
void axpy_f16_f32(int64_t n, float s, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * fp16_to_f32(x[i]);
}
void f32_to_f16_row(int64_t n, const float* x, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}
void f16_to_f32_row(int64_t n, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}
float dot_f32(int64_t n, const float* a, const float* b) {
  return dot(
      n, [a](int64_t i) { return a[i]; }, b);
}
void axpy_f32(int64_t n, float s, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}
int64_t argmax_f32(int64_t n, const float* x) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

constexpr VecFns kFns{dot_f16_f32, axpy_f16_f32, f32_to_f16_row, f16_to_f32_row,
                      dot_f32,     axpy_f32,     argmax_f32};

}  // namespace

const VecFns& vec_fns_generic() {
  return kFns;
}

}  // namespace pagoda::cpu
