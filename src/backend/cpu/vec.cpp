#include "backend/cpu/vec.h"

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/vec_impl.h"

namespace pagoda::cpu {
namespace {

// Consulted on every call (a few loads) so ISA overrides in tests take effect at once.
inline const VecFns& fns() {
  switch (best_isa()) {
    case Isa::kAvx512:
      return vec_fns_avx512();
    case Isa::kAvx2:
      return vec_fns_avx2();
    default:
      return vec_fns_generic();
  }
}

}  // namespace

float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  return fns().dot_f16_f32(n, a, b);
}
void axpy_f16_f32(int64_t n, float s, const uint16_t* x, float* y) {
  fns().axpy_f16_f32(n, s, x, y);
}
void f32_to_f16_row(int64_t n, const float* x, uint16_t* y) {
  fns().f32_to_f16_row(n, x, y);
}
void f16_to_f32_row(int64_t n, const uint16_t* x, float* y) {
  fns().f16_to_f32_row(n, x, y);
}
float dot_f32(int64_t n, const float* a, const float* b) {
  return fns().dot_f32(n, a, b);
}
void axpy_f32(int64_t n, float s, const float* x, float* y) {
  fns().axpy_f32(n, s, x, y);
}
int64_t argmax_f32(int64_t n, const float* x) {
  return fns().argmax_f32(n, x);
}

}  // namespace pagoda::cpu
