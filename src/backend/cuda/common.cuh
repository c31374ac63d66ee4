// Device helpers shared by the kernels: activation loads/stores by type, warp reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <utility>

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

// 8 fp16 values (one 16-byte word, the first in the lowest bits) as floats.
__device__ __forceinline__ void unpack8h(const uint4 u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
    f[2 * k] = v.x;
    f[2 * k + 1] = v.y;
  }
}

// Weights are read once per product: stream them past L1 (16, 8 or 4 bytes, aligned).
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t load_stream4(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// Q8Act's rule for one 32-element block of activations (already rounded to fp16): the
// scale d = amax / 127 and the sum of the quants, each as stored.
struct Q8Scales {
  float d;  // rounded to fp16
  float s;  // sum * d, rounded to fp16
  int c;    // sum of the quants
};
__device__ __forceinline__ Q8Scales q8_scales(float amax, int sum) {
  const float dd = amax / 127.0f;
  return {__half2float(__float2half_rn(dd)),
          __half2float(__float2half_rn(static_cast<float>(sum) * dd)), sum};
}
// The quant of v in a block whose max |value| is amax.
__device__ __forceinline__ int q8_quant(float v, float amax) {
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  return __float2int_rn(v * id);
}

// Quantizes the 32-element block `blk` of activation row t, one value per lane of a
// whole warp (v already rounded to fp16), into `out` by Q8Act's rule (kernels.h).
__device__ __forceinline__ void store_q8_block(float v, const Q8Act& out, int64_t t, int64_t blk,
                                               int lane) {
  const float amax = warp_max(fabsf(v));
  const int qi = q8_quant(v, amax);
  const int sum = static_cast<int>(warp_sum(static_cast<float>(qi)));  // exact: |sum| < 2^24
  const int64_t nb = out.cols / 32;
  out.q[t * out.cols + blk * 32 + lane] = static_cast<int8_t>(qi);
  if (lane == 0) {
    const Q8Scales sc = q8_scales(amax, sum);
    out.d[t * nb + blk] = sc.d;
    out.s[t * nb + blk] = sc.s;
    out.c[t * nb + blk] = sc.c;
  }
}

// Four FP8 E4M3 values (one 32-bit word, the first in the lowest byte) as two half2 in
// the same order. Exact: every E4M3 value is an fp16 value.
__device__ __forceinline__ void fp8x4_to_half2x2(uint32_t w, __half2* lo, __half2* hi) {
  *lo = __half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3));
  *hi = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3));
}

// Warps an SM holds on the architecture being compiled: 48 on sm_86-sm_89 and sm_120
// (1,536 threads), 64 on sm_80, Hopper and sm_100. Launch bounds that ask for more
// resident blocks than that are an error there (ptxas), so kernels tuned for Hopper's 64
// cap their minimum blocks by it.
#if defined(__CUDA_ARCH__) && \
    ((__CUDA_ARCH__ >= 860 && __CUDA_ARCH__ < 900) || __CUDA_ARCH__ >= 1200)
constexpr int kMaxWarpsPerSm = 48;
#else
constexpr int kMaxWarpsPerSm = 64;
#endif

// Programmatic dependent launch (Hopper): each kernel of a step lets the next one launch
// early (pdl_trigger at its start), and the next waits (pdl_wait) before it reads what
// the earlier ones wrote; a weight product streams its first weights before waiting. The
// wait returns at once for kernels launched the ordinary way.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether the kernels of a step launch as programmatic dependents (Hopper and later,
// unless set_pdl_allowed(false) in kernels.h).
bool pdl_enabled();

// Launches `kernel` on `stream` (with `smem` bytes of dynamic shared memory), as a
// programmatic dependent of the previous kernel when pdl_enabled(). Every kernel launched
// so calls pdl_wait() in all its blocks before it touches memory an earlier kernel
// writes or reads (the weight products first request their weights): a kernel's
// completion then implies its predecessor's, so dependencies reach across kernels. The
// kernels of a step call pdl_trigger() first, so the next one's launch overlaps them.
template <typename... Params, typename... Args>
cudaError_t launch_dependent_smem(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                             Args&&... args) {
  return launch_dependent_smem(kernel, grid, block, 0, stream, std::forward<Args>(args)...);
}

// The number of multiprocessors of the current device (read once per process).
inline int sm_count() {
  static const int sms = [] {
    int dev = 0, count = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    return count > 0 ? count : 132;
  }();
  return sms;
}

// Launch grid size for n items of `per` each.
inline unsigned blocks_for(int64_t n, int64_t per) {
  return static_cast<unsigned>((n + per - 1) / per);
}

}  // namespace pagoda::cuda
