// Row-wise and elementwise ops: RMSNorm (optionally over a gathered subset of rows) and
// SiLU-and-multiply, each writing the next GEMM's activation type directly.
#include <atomic>
#include <cstdlib>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {
namespace {

constexpr int kNormMaxThreads = 1024;

// Where a row-wise op writes: activations of a type, or 8-bit blocks (Q8Act).
struct ActOut {
  void* out;
  ActType type;
  uint32_t* amax = nullptr;  // with it, max |value as stored| goes there (fp8_amax's bits)
};

// Stores value j of row i; for Q8Act the lanes of a warp hold one 32-element block
// (j - lane a multiple of 32, every lane present).
__device__ __forceinline__ float store_out(const ActOut& o, int64_t i, int64_t cols, int64_t j,
                                           float v) {
  store_act(o.out, o.type, i * cols + j, v);
  return o.type == ActType::kF32   ? v
         : o.type == ActType::kF16 ? __half2float(__float2half_rn(v))
                                   : __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float store_out(const Q8Act& o, int64_t i, int64_t, int64_t j, float v) {
  store_q8_block(__half2float(__float2half_rn(v)), o, i, j / 32, static_cast<int>(j % 32));
  return 0.0f;
}
__device__ __forceinline__ uint32_t* amax_of(const ActOut& o) {
  return o.amax;
}
__device__ __forceinline__ uint32_t* amax_of(const Q8Act&) {
  return nullptr;
}

// One block per row. Squares summed in double as the CPU (and llama.cpp) do, so the
// scale agrees to the last bit in most rows. A decode step's norm is one block on the
// path between two products, so its latency counts: the weights are requested before
// waiting for the kernels before (they don't depend on them), a row of up to kHeld
// elements per thread stays in registers between the two passes, and the warps' sums
// meet in one warp rather than in every thread.
constexpr int kHeld = 16;

template <typename Out>
__global__ void rms_norm_kernel(const float* __restrict__ x, int64_t x_stride,
                                const int32_t* __restrict__ rows, const float* __restrict__ w,
                                Out out, int dim, float eps) {
  pdl_trigger();
  const int nt = static_cast<int>(blockDim.x);
  const bool held = dim <= kHeld * nt;
  float wv[kHeld], xv[kHeld];
  if (held) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int j = static_cast<int>(threadIdx.x) + k * nt;
      wv[k] = j < dim ? w[j] : 0.0f;
    }
  }
  pdl_wait();
  const int i = blockIdx.x;
  const int64_t r = rows ? rows[i] : i;
  const float* xr = x + r * x_stride;
  double ss = 0;
  if (held) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int j = static_cast<int>(threadIdx.x) + k * nt;
      xv[k] = j < dim ? xr[j] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kHeld; ++k) ss += static_cast<double>(xv[k] * xv[k]);
  } else {
    for (int j = threadIdx.x; j < dim; j += nt) {
      const float v = xr[j];
      ss += static_cast<double>(v * v);
    }
  }
  __shared__ double part[kNormMaxThreads / kWarp];
  __shared__ double total_s;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    double t = lane < nt / kWarp ? part[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) total_s = t;
  }
  __syncthreads();
  const float scale = 1.0f / sqrtf(static_cast<float>(total_s / dim) + eps);
  float m = 0.0f;
  if (held) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int j = static_cast<int>(threadIdx.x) + k * nt;
      if (j < dim) m = fmaxf(m, fabsf(store_out(out, i, dim, j, xv[k] * scale * wv[k])));
    }
  } else {
    for (int j = threadIdx.x; j < dim; j += nt)
      m = fmaxf(m, fabsf(store_out(out, i, dim, j, xr[j] * scale * w[j])));
  }
  if (uint32_t* amax = amax_of(out)) {
    // One atomic per row: the block's max through shared memory.
    __shared__ float mx[kNormMaxThreads / kWarp];
    m = warp_max(m);
    if (lane == 0) mx[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int k = 1; k < nt / kWarp; ++k) m = fmaxf(m, mx[k]);
      atomicMax(amax, __float_as_uint(m));
    }
  }
}

template <typename Out>
__global__ void silu_mul_kernel(const float* __restrict__ gu, int64_t n_total, int ff, Out out) {
  pdl_trigger();
  pdl_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_total) return;
  const int64_t t = i / ff, j = i % ff;
  const float g = gu[t * 2 * ff + j], u = gu[t * 2 * ff + ff + j];
  // expf, not __expf: the CPU's exp is accurate to an ulp and so is this.
  store_out(out, t, ff, j, g / (1.0f + expf(-g)) * u);
}

// One block per row; ties go to the lowest index, as the CPU's argmax.
__global__ void argmax_kernel(const float* __restrict__ logits, int n_vocab,
                              int32_t* __restrict__ out) {
  pdl_trigger();
  pdl_wait();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  float best = -INFINITY;
  int idx = n_vocab;
  // A thread's values in ascending order (16-byte reads where rows are aligned, several
  // in flight): ascending i keeps the first maximum of the thread.
  const bool vec = n_vocab % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0;
  const int n4 = vec ? n_vocab / 4 : 0;
#pragma unroll 4
  for (int c = threadIdx.x; c < n4; c += blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(row)[c];
    if (v.x > best) best = v.x, idx = 4 * c;
    if (v.y > best) best = v.y, idx = 4 * c + 1;
    if (v.z > best) best = v.z, idx = 4 * c + 2;
    if (v.w > best) best = v.w, idx = 4 * c + 3;
  }
  for (int i = 4 * n4 + threadIdx.x; i < n_vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > best) best = v, idx = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ob > best || (ob == best && oi < idx)) best = ob, idx = oi;
  }
  __shared__ float sb[32];
  __shared__ int si[32];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) sb[warp] = best, si[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w)
      if (sb[w] > best || (sb[w] == best && si[w] < idx)) best = sb[w], idx = si[w];
    // All NaN: the CPU's argmax returns 0 then.
    out[blockIdx.x] = idx < n_vocab ? idx : 0;
  }
}

__global__ void fill_nan_kernel(uint32_t* p, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 0x7fc07fc0u;  // a NaN as f32, and two NaNs as f16 or bf16
}

}  // namespace

Status rms_norm(const float* x, int64_t x_stride, const int32_t* rows, const float* w, void* out,
                ActType out_type, int n, int dim, float eps, cudaStream_t stream,
                uint32_t* amax_out) {
  if (n <= 0) return Status::ok();
  // A decode step normalises one row or a few: a whole SM's worth of threads each.
  const int threads = n < 64 ? 1024 : 256;
  launch_dependent(rms_norm_kernel<ActOut>, n, threads, stream, x, x_stride, rows, w,
                   ActOut{out, out_type, amax_out}, dim, eps);
  return launch_status("rms_norm");
}

Status rms_norm_q8(const float* x, int64_t x_stride, const int32_t* rows, const float* w,
                   const Q8Act& out, int n, int dim, float eps, cudaStream_t stream) {
  if (dim % 32 != 0 || out.cols != dim)
    return invalid_argument("rms_norm_q8: rows must be whole 32-element blocks of out's width");
  if (n <= 0) return Status::ok();
  const int threads = n < 64 ? 1024 : 256;  // multiples of 32: warps hold whole blocks
  launch_dependent(rms_norm_kernel<Q8Act>, n, threads, stream, x, x_stride, rows, w, out, dim, eps);
  return launch_status("rms_norm_q8");
}

Status silu_mul(const float* gu, int n, int ff, void* out, ActType out_type, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * ff;
  if (total <= 0) return Status::ok();
  launch_dependent(silu_mul_kernel<ActOut>, blocks_for(total, 256), 256, stream, gu, total, ff,
                   ActOut{out, out_type});
  return launch_status("silu_mul");
}

Status silu_mul_q8(const float* gu, int n, int ff, const Q8Act& out, cudaStream_t stream) {
  if (ff % 32 != 0 || out.cols != ff)
    return invalid_argument("silu_mul_q8: rows must be whole 32-element blocks of out's width");
  const int64_t total = static_cast<int64_t>(n) * ff;
  if (total <= 0) return Status::ok();
  // 256 threads: a warp's 32 consecutive elements are one block of one row.
  launch_dependent(silu_mul_kernel<Q8Act>, blocks_for(total, 256), 256, stream, gu, total, ff, out);
  return launch_status("silu_mul_q8");
}

namespace {
std::atomic<bool> g_pdl_allowed{true};
}  // namespace

void set_pdl_allowed(bool allowed) {
  g_pdl_allowed.store(allowed, std::memory_order_relaxed);
}

bool pdl_enabled() {
  static const bool hopper = [] {
    // Programmatic dependent launch exists from Hopper on; a build that also targets
    // sm_80 / sm_89 (-DCMAKE_CUDA_ARCHITECTURES="80;89;90") launches the ordinary way there.
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           major >= 9;
  }();
  return hopper && g_pdl_allowed.load(std::memory_order_relaxed);
}

Status argmax_rows(const float* logits, int n, int n_vocab, int32_t* out, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  launch_dependent(argmax_kernel, n, 1024, stream, logits, n_vocab, out);
  return launch_status("argmax_rows");
}

Status fill_nan(void* p, size_t bytes, cudaStream_t stream) {
  const size_t n = bytes / 4;
  if (n == 0) return Status::ok();
  fill_nan_kernel<<<blocks_for(static_cast<int64_t>(n), 256), 256, 0, stream>>>(
      static_cast<uint32_t*>(p), n);
  return launch_status("fill_nan");
}

}  // namespace pagoda::cuda
