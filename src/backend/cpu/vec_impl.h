// The per-ISA implementations behind vec.h.
#pragma once

#include <cstdint>

namespace pagoda::cpu {

struct VecFns {
  float (*dot_f16_f32)(int64_t, const uint16_t*, const float*);
  void (*axpy_f16_f32)(int64_t, float, const uint16_t*, float*);
  void (*f32_to_f16_row)(int64_t, const float*, uint16_t*);
  void (*f16_to_f32_row)(int64_t, const uint16_t*, float*);
  float (*dot_f32)(int64_t, const float*, const float*);
  void (*axpy_f32)(int64_t, float, const float*, float*);
  int64_t (*argmax_f32)(int64_t, const float*);
};

const VecFns& vec_fns_generic();
const VecFns& vec_fns_avx2();
const VecFns& vec_fns_avx512();

}  // namespace pagoda::cpu
