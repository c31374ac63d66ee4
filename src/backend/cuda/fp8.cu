// Per-tensor FP8 E4M3 quantization (weights at load, activations before each FP8
// product): a max-|x| reduction, then a pass dividing by amax / 448 with saturation.
#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_act(const void* x, ActType t, int64_t i) {
  switch (t) {
    case ActType::kF32:
      return static_cast<const float*>(x)[i];
    case ActType::kF16:
      return __half2float(static_cast<const __half*>(x)[i]);
    default:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
  }
}

__device__ __forceinline__ float scale_of(const uint32_t* amax_bits) {
  const float amax = __uint_as_float(*amax_bits);
  return amax > 0.0f && isfinite(amax) ? amax / kFp8Max : 1.0f;
}

// Each block walks rows blockIdx.y, + gridDim.y, ... and reduces its max in shared
// memory before one atomic: a max per warp straight to the one address cost about as
// many atomics as the batch has 32-element pieces (65,536 for 512 tokens of 4,096).
__global__ void amax_kernel(const void* __restrict__ x, ActType t, int64_t rows, int64_t cols,
                            int64_t stride, uint32_t* __restrict__ amax_bits) {
  __shared__ float warp_m[kThreads / kWarp];
  float m = 0.0f;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)
      m = fmaxf(m, fabsf(load_act(x, t, r * stride + c)));
  m = warp_max(m);
  if (threadIdx.x % kWarp == 0) warp_m[threadIdx.x / kWarp] = m;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    m = warp_max(threadIdx.x < kThreads / kWarp ? warp_m[threadIdx.x] : 0.0f);
    if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
  }
}

// With `reset`, the last block to have read the max sets it (and the counter) back to 0,
// so the next product's max starts from 0 without a memset between kernels.
__global__ void quantize_kernel(const void* __restrict__ x, ActType t, int64_t cols, int64_t stride,
                                uint32_t* __restrict__ amax_bits,
                                __nv_fp8_storage_t* __restrict__ out, float* __restrict__ scale,
                                uint32_t* __restrict__ reset) {
  __shared__ float s_shared;
  if (threadIdx.x == 0) {
    s_shared = scale_of(amax_bits);  // the block's one read of the max
    if (reset) {
      __threadfence();
      const unsigned blocks = gridDim.x * gridDim.y;
      if (atomicAdd(reset, 1u) == blocks - 1) {
        *amax_bits = 0;
        *reset = 0;
      }
    }
  }
  __syncthreads();
  const float s = s_shared;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale = s;
  const int64_t r = blockIdx.y;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[r * cols + c] = __nv_cvt_float_to_fp8(__fdiv_rn(load_act(x, t, r * stride + c), s),
                                              __NV_SATFINITE, __NV_E4M3);
}

// One grid row per matrix row (rows <= 65,535: a weight matrix or a step's tokens).
dim3 grid_for(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>(std::min<int64_t>(64, (cols + kThreads - 1) / kThreads)),
              static_cast<unsigned>(rows));
}

}  // namespace

Status fp8_amax(const void* x, ActType t, int64_t rows, int64_t cols, int64_t stride,
                uint32_t* amax_bits, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  if (rows > 65535) return invalid_argument("fp8_amax: more than 65,535 rows");
  constexpr int64_t kRowBlocks = 64;  // grid rows of the max (each block walks its rows)
  const dim3 grid = grid_for(std::min(rows, kRowBlocks), cols);
  amax_kernel<<<grid, kThreads, 0, stream>>>(x, t, rows, cols, stride, amax_bits);
  return launch_status("fp8_amax");
}

Status fp8_quantize(const void* x, ActType t, int64_t rows, int64_t cols, int64_t stride,
                    uint32_t* amax_bits, uint8_t* out, float* scale, cudaStream_t stream,
                    uint32_t* reset) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  if (rows > 65535) return invalid_argument("fp8_quantize: more than 65,535 rows");
  quantize_kernel<<<grid_for(rows, cols), kThreads, 0, stream>>>(
      x, t, cols, stride, amax_bits, reinterpret_cast<__nv_fp8_storage_t*>(out), scale, reset);
  return launch_status("fp8_quantize");
}

}  // namespace pagoda::cuda
