// Vector primitives for attention and other row-wise work, dispatched per call to the
// best ISA level (cpu_features.h), like matmul. f16 values are IEEE binary16 bits.
#pragma once

#include <cstdint>

namespace pagoda::cpu {

// sum_i f16(a[i]) * b[i], accumulated in f32 (summation order unspecified).
float dot_f16_f32(int64_t n, const uint16_t* a, const float* b);
// y[i] += s * f16(x[i]).
void axpy_f16_f32(int64_t n, float s, const uint16_t* x, float* y);
// Round to nearest even, overflow to inf: bit-identical to f32_to_fp16 except for NaN
// payloads.
void f32_to_f16_row(int64_t n, const float* x, uint16_t* y);
void f16_to_f32_row(int64_t n, const uint16_t* x, float* y);
// sum_i a[i] * b[i] in f32 (summation order unspecified).
float dot_f32(int64_t n, const float* a, const float* b);
// y[i] += s * x[i].
void axpy_f32(int64_t n, float s, const float* x, float* y);
// Index of the largest of x[0..n) (0 when n <= 0): the first of equal maxima (+0 and -0
// are equal), NaNs passed over, except that a NaN x[0] gives 0. The same answer as
// `best = 0; for i: if (x[i] > x[best]) best = i`, which samplers and runners rely on.
int64_t argmax_f32(int64_t n, const float* x);

}  // namespace pagoda::cpu
