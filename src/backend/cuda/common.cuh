// Device helpers shared by the kernels: activation loads/stores by type, warp reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ void store_act(void* out, ActType t, int64_t i, float v) {
  switch (t) {
    case ActType::kF32:
      static_cast<float*>(out)[i] = v;
      break;
    case ActType::kF16:
      static_cast<__half*>(out)[i] = __float2half_rn(v);
      break;
    case ActType::kBF16:
      static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
      break;
  }
}

__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// Launch grid size for n items of `per` each.
inline unsigned blocks_for(int64_t n, int64_t per) {
  return static_cast<unsigned>((n + per - 1) / per);
}

}  // namespace pagoda::cuda
