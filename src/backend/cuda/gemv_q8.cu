// Matrix-vector products for the 32-element quantized types (Q8_0, Q4_0, Q4_1) on 8-bit
// activations, as llama.cpp's CPU and CUDA paths and Pagoda's CPU backend compute them:
// each 32-element block of x is quantized (d = amax / 127 rounded to fp16, q = x * 127 /
// amax rounded to even, plus the block's sum for Q4_1's offset; in decode steps the norm
// or SiLU in front writes them, see Q8Act), then one lane takes one weight block per
// step and multiplies 4 bytes at a time (dp4a). Weights are read
// as 16-byte loads; the integer dot products keep the arithmetic well under the
// memory time even at 4 bits per weight.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv_q8.h"

namespace pagoda::cuda {
namespace {

constexpr int kRowsPerBlock = 4;
constexpr int kUnroll = 4;
int g_q8_split_override = 0;

// One warp per 32-element block of x: x rows [n][cols] in f16.
__global__ void quantize_act_kernel(const __half* __restrict__ x, int64_t x_stride, int64_t nb,
                                    Q8Act out) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x % kWarp;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int t = blockIdx.y;
  if (blk >= nb) return;
  store_q8_block(__half2float(x[t * x_stride + blk * 32 + lane]), out, t, blk, lane);
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

// SPLIT warps share a row (as in gemv.cu) so long rows of few-row matrices still fill
// the GPU. One token's 4-bit kernels are held to 64 registers so that 8 blocks (32
// warps) fit on an SM; the compiler's own choice (72-80 registers) fitted 6.
template <DType T>
constexpr int min_blocks(int nt) {
  return nt == 1 && T != DType::kQ8_0 ? 8 : 4;
}
template <DType T, int NT, int SPLIT>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp, min_blocks<T>(NT))
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
  constexpr int kGroup = kUnroll * kStride;
  const int64_t b0 = lane + kWarp * part;
  // A lane's blocks go in groups of kUnroll, each requested (predicated at the row's
  // end) before the previous group's arithmetic. The first group is requested before
  // waiting for the activations (pdl_wait): in the 8B model's matrices that is every
  // block a lane has (rows of 128 to 448 blocks shared by 32 to 128 lanes), so the whole
  // product's weights are in flight while the producer of x finishes.
  auto load_group = [&](WBlock* dst, int64_t b) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (b + u * kStride < nb) dst[u] = load_block<T>(w, r * nb + b + u * kStride);
  };
  WBlock cur[kUnroll] = {};
  load_group(cur, b0);
  pdl_wait();
  for (int64_t b = b0; b < nb; b += kGroup) {
    WBlock next[kUnroll] = {};
    if (b + kGroup < nb) load_group(next, b + kGroup);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (b + u * kStride < nb) accumulate_block(cur[u], b + u * kStride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = next[u];
  }
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

template <DType T, int SPLIT>
void launch_split(const DeviceMatrix& w, const Q8Act& x, int n, float* y, int64_t y_stride,
                  bool accumulate, cudaStream_t stream) {
  const unsigned threads = kRowsPerBlock * kWarp;
  const unsigned grid = blocks_for(w.rows, kRowsPerBlock / SPLIT);
  if (n == 1)
    launch_dependent(gemv_q8_kernel<T, 1, SPLIT>, grid, threads, stream, w, x.q, x.d, x.s, x.c, n,
                     y, y_stride, accumulate);
  else
    launch_dependent(gemv_q8_kernel<T, 8, SPLIT>, grid, threads, stream, w, x.q, x.d, x.s, x.c, n,
                     y, y_stride, accumulate);
}

template <DType T>
void launch(const DeviceMatrix& w, const Q8Act& x, int n, float* y, int64_t y_stride,
            bool accumulate, cudaStream_t stream) {
  // One warp per row, each lane with 4 or more blocks in flight, unless a row is long
  // and the matrix has few rows: measured on the H200 (n = 1, 8B shapes), Q4_0 qkv
  // 6144x4096 12.1 us with one warp against 15.1 with four, wo 4096x4096 10.6 against
  // 12.8, but down 4096x14336 17.2 with four against 18.4 with one.
  const int split = g_q8_split_override > 0                ? g_q8_split_override
                    : w.cols / 32 >= 256 && w.rows < 16384 ? 4
                                                           : 1;
  if (split == 1)
    launch_split<T, 1>(w, x, n, y, y_stride, accumulate, stream);
  else if (split == 2)
    launch_split<T, 2>(w, x, n, y, y_stride, accumulate, stream);
  else
    launch_split<T, 4>(w, x, n, y, y_stride, accumulate, stream);
}

size_t round256(size_t n) {
  return (n + 255) / 256 * 256;
}

}  // namespace

// Layout: q int8 [n][cols], then d, s (float) and c (int) [n][cols / 32] each.
size_t gemv_q8_scratch_bytes(int64_t cols, int n) {
  const size_t nb = static_cast<size_t>(cols / 32) * static_cast<size_t>(n);
  return round256(static_cast<size_t>(cols) * n) + 3 * round256(nb * 4);
}

void set_gemv_q8_split_override(int split) {
  g_q8_split_override = split == 1 || split == 2 || split == 4 ? split : 0;
}

Q8Act q8_act_view(void* scratch, int64_t cols, int n) {
  const int64_t nb = cols / 32;
  auto* base = static_cast<uint8_t*>(scratch);
  const size_t part = round256(static_cast<size_t>(nb) * n * 4);
  Q8Act a;
  a.cols = cols;
  a.q = reinterpret_cast<int8_t*>(base);
  a.d = reinterpret_cast<float*>(base + round256(static_cast<size_t>(cols) * n));
  a.s = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.d) + part);
  a.c = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(a.s) + part);
  return a;
}

Status quantize_q8(const void* x, int64_t x_stride, int n, const Q8Act& out, cudaStream_t stream) {
  if (out.cols % 32 != 0) return invalid_argument("quantized rows must be whole blocks");
  const int64_t nb = out.cols / 32;
  const dim3 grid(blocks_for(nb * kWarp, 256), static_cast<unsigned>(n));
  launch_dependent(quantize_act_kernel, grid, 256, stream, static_cast<const __half*>(x), x_stride,
                   nb, out);
  return launch_status("quantize_act");
}

Status gemv_q8_quantized(const DeviceMatrix& w, const Q8Act& x, int n, float* y, int64_t y_stride,
                         bool accumulate, cudaStream_t stream) {
  if (w.cols % 32 != 0) return invalid_argument("quantized rows must be whole blocks");
  if (x.cols != w.cols) return invalid_argument("gemv_q8: activation width is not the matrix's");
  if (n < 1 || n > kGemvMaxTokens) return invalid_argument("gemv_q8: 1 to 8 tokens");
  switch (w.type) {
    case DType::kQ8_0:
      launch<DType::kQ8_0>(w, x, n, y, y_stride, accumulate, stream);
      break;
    case DType::kQ4_0:
      launch<DType::kQ4_0>(w, x, n, y, y_stride, accumulate, stream);
      break;
    case DType::kQ4_1:
      launch<DType::kQ4_1>(w, x, n, y, y_stride, accumulate, stream);
      break;
    default:
      return unsupported("gemv_q8: weight type " + std::string(dtype_name(w.type)));
  }
  return launch_status("gemv_q8");
}

Status gemv_q8(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
               int64_t y_stride, bool accumulate, void* scratch, size_t scratch_bytes,
               cudaStream_t stream) {
  // quantize_q8 and gemv_q8_quantized check the widths.
  if (scratch_bytes < gemv_q8_scratch_bytes(w.cols, n))
    return internal_error("gemv_q8: scratch too small");
  const Q8Act a = q8_act_view(scratch, w.cols, n);
  PAGODA_RETURN_IF_ERROR(quantize_q8(x, x_stride, n, a, stream));
  return gemv_q8_quantized(w, a, n, y, y_stride, accumulate, stream);
}

}  // namespace pagoda::cuda
