// Quantized-weight matrix-vector products on 8-bit activations (gemv_q8.cu).
#pragma once

#include <type_traits>
#include <utility>

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

// Scratch for the quantized activations of n rows of `cols` values.
size_t gemv_q8_scratch_bytes(int64_t cols, int n);
// The Q8Act of n rows of `cols` values laid out in `scratch` (gemv_q8_scratch_bytes).
Q8Act q8_act_view(void* scratch, int64_t cols, int n);
// out = the 8-bit quantization of f16 rows x ([n][out.cols], row stride x_stride).
Status quantize_q8(const void* x, int64_t x_stride, int n, const Q8Act& out, cudaStream_t stream);
// y[t][r] (+)= W[r] . x[t] for Q8_0 / Q4_0 / Q4_1 / IQ4_NL / NF4 / Q4_K / Q5_K / Q6_K
// weights and activations already
// quantized (x.cols == w.cols), t < n <= 8.
Status gemv_q8_quantized(const DeviceMatrix& w, const Q8Act& x, int n, float* y, int64_t y_stride,
                         bool accumulate, cudaStream_t stream);
// Tests and benchmarks: force 1, 2 or 4 warps per row (0: the size heuristic).
void set_gemv_q8_split_override(int split);
// Tests: force 2 or 4 weight blocks a lane per group (0: PAGODA_CUDA_Q8_UNROLL, else 2).
void set_gemv_q8_unroll_override(int unroll);
// Calls f with std::integral_constant<DType, T> for each GGUF block type these kernels
// take (the K types in kquant_layout.h's layout); false for any other type. The one list
// of them: the launches (gemv_q8.cu) and is_q8_block_type go by it.
template <DType... Ts, typename F>
bool visit_dtype_among(DType type, F&& f) {
  return ((type == Ts && (f(std::integral_constant<DType, Ts>{}), true)) || ...);
}
template <typename F>
bool visit_q8_type(DType type, F&& f) {
  return visit_dtype_among<DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kIQ4_NL, DType::kNF4,
                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K>(type, std::forward<F>(f));
}
inline bool is_q8_block_type(DType t) {
  return visit_q8_type(t, [](auto) {});
}
// gemv_takes / gemv_fused (kernels.h) for those types (gemv_takes checks the epilogue).
bool gemv_q8_takes(const DeviceMatrix& w);
Status gemv_q8_fused(const DeviceMatrix& w, const void* x, float* y, bool accumulate,
                     const GemvFusion& f, cudaStream_t stream);
// The same from f16 x: quantizes into `scratch`, then multiplies.
Status gemv_q8(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
               int64_t y_stride, bool accumulate, void* scratch, size_t scratch_bytes,
               cudaStream_t stream);

}  // namespace pagoda::cuda
