// Quantized-weight matrix-vector products on 8-bit activations (gemv_q8.cu).
#pragma once

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

// Scratch for the quantized activations of n rows of `cols` values.
size_t gemv_q8_scratch_bytes(int64_t cols, int n);
// y[t][r] (+)= W[r] . x[t] for Q8_0 / Q4_0 / Q4_1 weights and f16 x, t < n <= 8.
Status gemv_q8(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
               int64_t y_stride, bool accumulate, void* scratch, size_t scratch_bytes,
               cudaStream_t stream);

}  // namespace pagoda::cuda
