// Matrix-vector products for the 32-element quantized types (Q8_0, Q4_0, Q4_1) on 8-bit
// activations, as llama.cpp's CPU and CUDA paths and Pagoda's CPU backend compute them:
// each 32-element block of x is quantized (d = amax / 127 rounded to fp16, q = x * 127 /
// amax rounded to even, plus the block's sum for Q4_1's offset), then one lane takes
// one weight block per step and multiplies 4 bytes at a time (dp4a). Weights are read
// as 16-byte loads; the integer dot products keep the arithmetic well under the
// memory time even at 4 bits per weight.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv_q8.h"

namespace pagoda::cuda {
namespace {

constexpr int kRowsPerBlock = 4;
constexpr int kUnroll = 4;

// One warp per 32-element block of x: x rows [n][cols] in f16.
__global__ void quantize_act_kernel(const __half* __restrict__ x, int64_t x_stride, int64_t nb,
                                    int8_t* __restrict__ q, float* __restrict__ d,
                                    float* __restrict__ s, int* __restrict__ c, int64_t cols) {
  pdl_trigger();
  const int lane = threadIdx.x % kWarp;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int t = blockIdx.y;
  if (blk >= nb) return;
  const float v = __half2float(x[t * x_stride + blk * 32 + lane]);
  const float amax = warp_max(fabsf(v));
  const float dd = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int qi = __float2int_rn(v * id);
  const int sum = static_cast<int>(warp_sum(static_cast<float>(qi)));  // exact: |sum| < 2^24
  q[t * cols + blk * 32 + lane] = static_cast<int8_t>(qi);
  if (lane == 0) {
    d[t * nb + blk] = __half2float(__float2half_rn(dd));
    s[t * nb + blk] = __half2float(__float2half_rn(static_cast<float>(sum) * dd));
    c[t * nb + blk] = sum;
  }
}

__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

struct WBlock {
  uint4 a, b;  // quants (b: second half of Q8_0)
  float d, m;
};

template <DType T>
__device__ __forceinline__ WBlock load_block(const DeviceMatrix& w, int64_t blk) {
  WBlock r;
  if constexpr (T == DType::kQ8_0) {
    const int8_t* p = static_cast<const int8_t*>(w.data) + blk * 32;
    r.a = load_stream16(p);
    r.b = load_stream16(p + 16);
  } else {
    r.a = load_stream16(static_cast<const uint8_t*>(w.data) + blk * 16);
    r.b = make_uint4(0, 0, 0, 0);
  }
  r.d = half_bits_to_float(w.scales[blk]);
  r.m = T == DType::kQ4_1 ? half_bits_to_float(w.mins[blk]) : 0.0f;
  return r;
}

// Integer dot product of a weight block with a block of quantized activations.
template <DType T>
__device__ __forceinline__ int block_dot(const WBlock& wb, const int8_t* xq) {
  const uint4 x0 = __ldg(reinterpret_cast<const uint4*>(xq));
  const uint4 x1 = __ldg(reinterpret_cast<const uint4*>(xq + 16));
  const int xs[8] = {static_cast<int>(x0.x), static_cast<int>(x0.y), static_cast<int>(x0.z),
                     static_cast<int>(x0.w), static_cast<int>(x1.x), static_cast<int>(x1.y),
                     static_cast<int>(x1.z), static_cast<int>(x1.w)};
  const int ws[4] = {static_cast<int>(wb.a.x), static_cast<int>(wb.a.y), static_cast<int>(wb.a.z),
                     static_cast<int>(wb.a.w)};
  int sum = 0;
  if constexpr (T == DType::kQ8_0) {
    const int wh[4] = {static_cast<int>(wb.b.x), static_cast<int>(wb.b.y), static_cast<int>(wb.b.z),
                       static_cast<int>(wb.b.w)};
#pragma unroll
    for (int k = 0; k < 4; ++k) sum = __dp4a(ws[k], xs[k], sum);
#pragma unroll
    for (int k = 0; k < 4; ++k) sum = __dp4a(wh[k], xs[4 + k], sum);
  } else {
    // Byte j of the block holds element j (low nibble) and j + 16 (high nibble).
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      sum = __dp4a(ws[k] & 0x0F0F0F0F, xs[k], sum);
      sum = __dp4a((ws[k] >> 4) & 0x0F0F0F0F, xs[4 + k], sum);
    }
  }
  return sum;
}

// SPLIT warps share a row (as in gemv.cu) so small matrices still fill the GPU.
template <DType T, int NT, int SPLIT>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    gemv_q8_kernel(DeviceMatrix w, const int8_t* __restrict__ xq, const float* __restrict__ xd,
                   const float* __restrict__ xs, const int* __restrict__ xc, int n,
                   float* __restrict__ y, int64_t y_stride, bool accumulate) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int part = warp % SPLIT;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kRowsPerBlock / SPLIT) + warp / SPLIT;
  __shared__ float red[kRowsPerBlock][NT];
  if (r >= w.rows) {
    pdl_wait();
    if constexpr (SPLIT > 1) __syncthreads();
    return;
  }
  const int64_t nb = w.cols / 32;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  auto accumulate_block = [&](const WBlock& wb, int64_t b) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n) {
        const int si = block_dot<T>(wb, xq + t * w.cols + b * 32);
        const float dx = xd[t * nb + b];
        if constexpr (T == DType::kQ8_0) {
          acc[t] += wb.d * dx * static_cast<float>(si);
        } else if constexpr (T == DType::kQ4_0) {
          // x . (q - 8) = sum(q x) - 8 sum(x): the activation sum from the CPU's rule.
          acc[t] += wb.d * dx * static_cast<float>(si - 8 * xc[t * nb + b]);
        } else {
          acc[t] += wb.d * dx * static_cast<float>(si) + wb.m * xs[t * nb + b];
        }
      }
    }
  };
  constexpr int kStride = kWarp * SPLIT;
  int64_t b = lane + kWarp * part;
  // The first weights are requested before waiting for the activations (pdl_wait).
  WBlock wb[kUnroll];
  bool full = b + (kUnroll - 1) * kStride < nb;
  if (full)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wb[u] = load_block<T>(w, r * nb + b + u * kStride);
  pdl_wait();
  while (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) accumulate_block(wb[u], b + u * kStride);
    b += kUnroll * kStride;
    full = b + (kUnroll - 1) * kStride < nb;
    if (full)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wb[u] = load_block<T>(w, r * nb + b + u * kStride);
  }
  for (; b < nb; b += kStride) accumulate_block(load_block<T>(w, r * nb + b), b);
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = warp_sum(acc[t]);
  if constexpr (SPLIT > 1) {
    if (lane == 0)
#pragma unroll
      for (int t = 0; t < NT; ++t) red[warp][t] = acc[t];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t] = 0.0f;
#pragma unroll
      for (int p = 0; p < SPLIT; ++p) acc[t] += red[warp + p][t];
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t < n && lane == 0) {
      float* dst = y + t * y_stride + r;
      *dst = accumulate ? *dst + acc[t] : acc[t];
    }
  }
}

template <DType T>
void launch(const DeviceMatrix& w, const int8_t* q, const float* d, const float* s, const int* c,
            int n, float* y, int64_t y_stride, bool accumulate, cudaStream_t stream) {
  const unsigned threads = kRowsPerBlock * kWarp;
  // Rows of a 4-bit 4096-wide matrix are 2.3 KB: share them between 4 warps unless the
  // matrix alone fills the GPU.
  if (w.rows >= 16384) {
    const unsigned grid = blocks_for(w.rows, kRowsPerBlock);
    if (n == 1)
      launch_dependent(gemv_q8_kernel<T, 1, 1>, grid, threads, stream, w, q, d, s, c, n, y,
                       y_stride, accumulate);
    else
      launch_dependent(gemv_q8_kernel<T, 8, 1>, grid, threads, stream, w, q, d, s, c, n, y,
                       y_stride, accumulate);
  } else {
    const unsigned grid = static_cast<unsigned>(w.rows);
    if (n == 1)
      launch_dependent(gemv_q8_kernel<T, 1, 4>, grid, threads, stream, w, q, d, s, c, n, y,
                       y_stride, accumulate);
    else
      launch_dependent(gemv_q8_kernel<T, 8, 4>, grid, threads, stream, w, q, d, s, c, n, y,
                       y_stride, accumulate);
  }
}

}  // namespace

namespace {
size_t round256(size_t n) {
  return (n + 255) / 256 * 256;
}
}  // namespace

// Layout: q int8 [n][cols], then d, s (float) and c (int) [n][cols / 32] each.
size_t gemv_q8_scratch_bytes(int64_t cols, int n) {
  const size_t nb = static_cast<size_t>(cols / 32) * static_cast<size_t>(n);
  return round256(static_cast<size_t>(cols) * n) + 3 * round256(nb * 4);
}

Status gemv_q8(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
               int64_t y_stride, bool accumulate, void* scratch, size_t scratch_bytes,
               cudaStream_t stream) {
  if (w.cols % 32 != 0) return invalid_argument("quantized rows must be whole blocks");
  if (scratch_bytes < gemv_q8_scratch_bytes(w.cols, n))
    return internal_error("gemv_q8: scratch too small");
  const int64_t nb = w.cols / 32;
  auto* base = static_cast<uint8_t*>(scratch);
  auto* q = reinterpret_cast<int8_t*>(base);
  const size_t part = round256(static_cast<size_t>(nb) * n * 4);
  auto* d = reinterpret_cast<float*>(base + round256(static_cast<size_t>(w.cols) * n));
  auto* s = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(d) + part);
  auto* c = reinterpret_cast<int*>(reinterpret_cast<uint8_t*>(s) + part);
  const dim3 qgrid(blocks_for(nb * kWarp, 256), static_cast<unsigned>(n));
  quantize_act_kernel<<<qgrid, 256, 0, stream>>>(static_cast<const __half*>(x), x_stride, nb, q, d,
                                                 s, c, w.cols);
  PAGODA_RETURN_IF_ERROR(launch_status("quantize_act"));
  switch (w.type) {
    case DType::kQ8_0:
      launch<DType::kQ8_0>(w, q, d, s, c, n, y, y_stride, accumulate, stream);
      break;
    case DType::kQ4_0:
      launch<DType::kQ4_0>(w, q, d, s, c, n, y, y_stride, accumulate, stream);
      break;
    case DType::kQ4_1:
      launch<DType::kQ4_1>(w, q, d, s, c, n, y, y_stride, accumulate, stream);
      break;
    default:
      return unsupported("gemv_q8: weight type " + std::string(dtype_name(w.type)));
  }
  return launch_status("gemv_q8");
}

}  // namespace pagoda::cuda
