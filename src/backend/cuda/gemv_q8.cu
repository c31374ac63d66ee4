// Matrix-vector products for the 32-element quantized types (Q8_0, Q4_0, Q4_1, and the
// table types IQ4_NL and NF4 in Q4_0's layout: table4.cuh) and the K types in their 32-element
// device layout (Q4_K, Q5_K, Q6_K: kquant_layout.h) on 8-bit activations, as llama.cpp's CPU and
// CUDA paths and Pagoda's CPU backend compute them: each 32-element block of x is quantized (d =
// amax / 127 rounded to fp16, q = x * 127 / amax rounded to even, plus the block's sum for Q4_1's
// offset; in decode steps the norm or SiLU in front writes them, see Q8Act), then one lane takes
// one weight block per step and multiplies 4 bytes at a time (dp4a). Weights are read as 16-byte
// loads; the integer dot products keep the arithmetic well under the memory time even at 4 bits per
// weight.
#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv_fusion.cuh"
#include "backend/cuda/gemv_q8.h"
#include "backend/cuda/kquant_layout.h"
#include "backend/cuda/table4.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kRowsPerBlock = 4;
int g_q8_split_override = 0;
int g_q8_unroll_override = 0;

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

struct WBlock {
  uint4 a, b;  // quants (b: second half of Q8_0; the K types' high bits in b.x, b.y)
  float d, m;  // the K types: kq::Block's factors
};

// The K type of T (a constant, so device code may use it).
template <DType T>
constexpr kq::KType kKType = T == DType::kQ4_K   ? kq::KType::kQ4K
                             : T == DType::kQ5_K ? kq::KType::kQ5K
                             : T == DType::kQ6_K ? kq::KType::kQ6K
                                                 : kq::KType::kNone;

template <DType T>
__device__ __forceinline__ WBlock load_block(const DeviceMatrix& w, uint32_t blk) {
  WBlock r;
  constexpr kq::KType kt = kKType<T>;
  if constexpr (kt != kq::KType::kNone) {
    r.a = load_stream16(static_cast<const uint8_t*>(w.data) + blk * 16);
    r.b = make_uint4(0, 0, 0, 0);
    if constexpr (kt == kq::KType::kQ5K) r.b.x = load_stream4(w.high + blk * 4);
    if constexpr (kt == kq::KType::kQ6K) {
      const uint2 h = load_stream8(w.high + blk * 8);
      r.b.x = h.x;
      r.b.y = h.y;
    }
    kq::Block f;
    kq::set_factors(kt, w.scales[blk], w.mins[blk / 8 * 2], w.mins[blk / 8 * 2 + 1], &f);
    r.d = f.d;
    r.m = f.m;
    return r;
  } else if constexpr (T == DType::kQ8_0) {
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

// A K type's weight block with a block of quantized activations (its 32 bytes as x0,
// x1; dx its scale, c the sum of its quants): kq::dot, the same function the host tests
// check.
template <DType T>
__device__ __forceinline__ float k_block_dot(const WBlock& wb, uint4 x0, uint4 x1, float dx,
                                             int c) {
  const int xs[8] = {static_cast<int>(x0.x), static_cast<int>(x0.y), static_cast<int>(x0.z),
                     static_cast<int>(x0.w), static_cast<int>(x1.x), static_cast<int>(x1.y),
                     static_cast<int>(x1.z), static_cast<int>(x1.w)};
  kq::Block k;
  k.q[0] = wb.a.x;
  k.q[1] = wb.a.y;
  k.q[2] = wb.a.z;
  k.q[3] = wb.a.w;
  k.hi[0] = wb.b.x;
  k.hi[1] = wb.b.y;
  k.d = wb.d;
  k.m = wb.m;
  return kq::dot(kKType<T>, k, xs, dx, c);
}

// Integer dot product of a weight block with a block of quantized activations (its 32
// bytes as x0, x1).
template <DType T>
__device__ __forceinline__ int block_dot(const WBlock& wb, uint4 x0, uint4 x1) {
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
  } else if constexpr (is_table4(T)) {
    // As Q4_0's nibbles below, each looked up in T's table first.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t w = static_cast<uint32_t>(ws[k]);
      sum = __dp4a(table4_lookup<T>(w & 0x0F0F0F0Fu), xs[k], sum);
      sum = __dp4a(table4_lookup<T>((w >> 4) & 0x0F0F0F0Fu), xs[4 + k], sum);
    }
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

// How many blocks of `kernel` the whole GPU holds at once: the grid of the fused kernels,
// whose blocks loop over the work (one wave).
template <typename Kernel>
int64_t resident_blocks(Kernel* kernel, int threads, size_t smem) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess)
    per_sm = 1;
  return static_cast<int64_t>(std::max(per_sm, 1)) * sm_count();
}

// Warps a row (1, 2, 4 ... up to max_split) for a fused kernel's `rows` rows in groups
// of R / split over `blocks` resident blocks: the fewest whole groups a block takes,
// divided by the warps on each row (a block's time), the smallest wins; ties go to
// fewer warps a row (fewer partial sums to meet).
int fused_split(int64_t rows, int R, int64_t blocks, int max_split) {
  int best = 1;
  double best_cost = 0;
  for (int s = 1; s <= max_split && R / s >= 2; s *= 2) {
    const int64_t groups = (rows + R / s - 1) / (R / s);
    const double cost = static_cast<double>((groups + blocks - 1) / blocks) / s;
    if (s == 1 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

// Where a product's 8-bit activations come from: a Q8Act in global memory written by the
// kernel before, or the block's own copy in shared memory, quantized by its prologue from
// f16 activations as quantize_q8 does (kQuant), or from the f32 residual through the
// RMSNorm before the product (kNormQuant: GemvFusion::in_norm_w).
enum class Pro { kNone, kQuant, kNormQuant };

// The prologue's copy: q [cols] bytes, then d, s and c [cols / 32] each. q holds each
// block's first 16 bytes in its first half (block b at b * 16) and their second 16 bytes
// in its second half: a warp's lanes, one block each, then read 16 consecutive bytes a
// lane, which shared memory serves without bank conflicts (32 bytes a block in place
// gave 4.5-way conflicts in Nsight Compute, 44% of the wavefronts in wo).
size_t q8_smem_bytes(int64_t cols) {
  return static_cast<size_t>(cols) + 12 * static_cast<size_t>(cols / 32);
}

// Fills the block's copy (q8_smem_bytes(cols) at `smem`) by all threads of the block from
// the row's values, elements j..j+7 of which load8(j, v) puts in v, and returns it as a
// Q8Act. Four lanes take a 32-element block, 8 values each (so the max and the sum take
// two shuffles, not five); ends with a __syncthreads.
template <typename Load8>
__device__ __forceinline__ Q8Act q8_prologue(int cols, uint4* smem, Load8 load8) {
  const int nb = cols / 32;
  Q8Act a;
  a.cols = cols;
  a.q = reinterpret_cast<int8_t*>(smem);
  a.d = reinterpret_cast<float*>(a.q + cols);
  a.s = a.d + nb;
  a.c = reinterpret_cast<int32_t*>(a.s + nb);
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const int sub = lane % 4;
  for (int b0 = threadIdx.x / kWarp * 8; b0 < nb; b0 += warps * 8) {
    const int b = b0 + lane / 4;
    const bool ok = b < nb;
    const int j = b * 32 + sub * 8;
    float v[8] = {};
    if (ok) load8(j, v);
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(v[k]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    int sum = 0;
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int qi = q8_quant(v[k], amax);
      sum += qi;
      packed[k / 4] |= static_cast<uint32_t>(qi & 0xff) << (8 * (k % 4));
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (ok) {
      const int half = (sub / 2) * (cols / 2) + b * 16 + (sub % 2) * 8;
      *reinterpret_cast<uint2*>(a.q + half) = make_uint2(packed[0], packed[1]);
      if (sub == 0) {
        const Q8Scales sc = q8_scales(amax, sum);
        a.d[b] = sc.d;
        a.s[b] = sc.s;
        a.c[b] = sc.c;
      }
    }
  }
  __syncthreads();
  return a;
}

// 1 / sqrt(mean(x^2) + eps) over the f32 row x (cols a multiple of 4, 16-byte aligned),
// summed by all threads of the block (red: a float per warp); every thread gets it.
__device__ __forceinline__ float block_rms_scale(const float* __restrict__ x, int cols, float eps,
                                                 float* red) {
  float ss = 0.0f;
  for (int j = threadIdx.x * 4; j < cols; j += blockDim.x * 4) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x + j));
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
  }
  ss = warp_sum(ss);
  if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) total += red[w];
  return 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
}

// The fused kernels' prologue: the block's copy of its one token's activations,
// quantized to Q8 in shared memory (q8_smem) from f16 (kQuant) or from the f32 residual
// through the RMS norm (kNormQuant). Without a prologue, x is the producer's.
template <Pro PRO, int R>
__device__ __forceinline__ Q8Act prologue(const Q8Act& x, const void* xin, int cols,
                                          const GemvFusion& f, uint4* q8_smem) {
  if constexpr (PRO == Pro::kQuant) {
    const __half* xh = static_cast<const __half*>(xin);
    return q8_prologue(cols, q8_smem, [&](int j, float* v) {
      unpack8h(__ldg(reinterpret_cast<const uint4*>(xh + j)), v);
    });
  } else if constexpr (PRO == Pro::kNormQuant) {
    // The norm's scale first (every block sums the squares of the whole row: 16 KiB of
    // L2 reads at 4,096 columns), then x * scale * norm_w quantized as the norm kernel's
    // output would be, without its rounding to f16.
    __shared__ float red_ss[R];
    const float* xf = static_cast<const float*>(xin);
    const float inv = block_rms_scale(xf, cols, f.in_eps, red_ss);
    return q8_prologue(cols, q8_smem, [&](int j, float* v) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(xf + j));
      const float4 b = __ldg(reinterpret_cast<const float4*>(xf + j + 4));
      const float4 wa = __ldg(reinterpret_cast<const float4*>(f.in_norm_w + j));
      const float4 wb = __ldg(reinterpret_cast<const float4*>(f.in_norm_w + j + 4));
      v[0] = a.x * inv * wa.x;
      v[1] = a.y * inv * wa.y;
      v[2] = a.z * inv * wa.z;
      v[3] = a.w * inv * wa.w;
      v[4] = b.x * inv * wb.x;
      v[5] = b.y * inv * wb.y;
      v[6] = b.z * inv * wb.z;
      v[7] = b.w * inv * wb.w;
    });
  } else {
    return x;
  }
}

// acc[t] += weight block wb (block b of its row) . token t's activations, for the n
// tokens present.
template <DType T, int NT, Pro PRO>
__device__ __forceinline__ void accumulate_block(float* acc, const WBlock& wb, const Q8Act& x,
                                                 int b, int n, int nb, int cols) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t < n) {
      uint4 x0, x1;
      if constexpr (PRO == Pro::kNone) {
        const uint4* xq =
            reinterpret_cast<const uint4*>(x.q + static_cast<uint32_t>(t * cols + b * 32));
        x0 = __ldg(xq);
        x1 = __ldg(xq + 1);
      } else {  // the prologue's halves (one token)
        x0 = *reinterpret_cast<const uint4*>(x.q + b * 16);
        x1 = *reinterpret_cast<const uint4*>(x.q + cols / 2 + b * 16);
      }
      const float dx = x.d[t * nb + b];
      if constexpr (kKType<T> != kq::KType::kNone) {
        acc[t] += k_block_dot<T>(wb, x0, x1, dx, x.c[t * nb + b]);
        continue;
      }
      const int si = block_dot<T>(wb, x0, x1);
      if constexpr (T == DType::kQ8_0 || is_table4(T)) {
        acc[t] += wb.d * dx * static_cast<float>(si);
      } else if constexpr (T == DType::kQ4_0) {
        // x . (q - 8) = sum(q x) - 8 sum(x): the activation sum from the CPU's rule.
        acc[t] += wb.d * dx * static_cast<float>(si - 8 * x.c[t * nb + b]);
      } else {
        acc[t] += wb.d * dx * static_cast<float>(si) + wb.m * x.s[t * nb + b];
      }
    }
  }
}

// SPLIT warps share a row (as in gemv.cu) so long rows of few-row matrices still fill
// the GPU. R: warps per block (the fused kernels take 16, so that more rows share one
// prologue). EPI as in gemv.cu. U: weight blocks a lane requests per group (two groups
// in flight). One token's kernels are held to 64 registers, so that 32 warps fit on an
// SM. At U = 4 only Q4_0 fitted that without spilling; Q8_0 (two 16-byte loads a block)
// and the K types (two factors a block) took the compiler's 90-117 registers, 16-20
// warps an SM, the fused 16-warp blocks one an SM. At U = 2 every type fits 64. Measured
// on an H100 (bench/RESULTS.md, stop 25), batch-1 decode of the 8B shapes at U = 2
// against 4: Q4_K_M 351 tok/s against 307, Q8_0 281 against 267, Q4_0 413 against 407.
// PAGODA_CUDA_Q8_UNROLL=4 restores U = 4 (the 4-bit 32-element types still held to 64).
template <DType T>
constexpr int min_blocks(int nt, int r, int u) {
  return (nt == 1 && (T == DType::kQ4_0 || T == DType::kQ4_1 || is_table4(T) || u == 2) ? 8 : 4) *
         kRowsPerBlock / r;
}
template <DType T, int NT, int R, int SPLIT, Pro PRO, GemvFusion::Kind EPI, int U>
__global__ void __launch_bounds__(R* kWarp, min_blocks<T>(NT, R, U))
    gemv_q8_kernel(DeviceMatrix w, Q8Act xg, const void* __restrict__ xin, int n,
                   float* __restrict__ y, int64_t y_stride, bool accumulate, int64_t n_groups,
                   GemvFusion f) {
  static_assert(PRO == Pro::kNone || NT == 1, "the prologue's copy holds one token");
  constexpr int RB = R / SPLIT;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int part = warp % SPLIT, wi = warp / SPLIT;
  // Double-buffered by the group's parity: a warp may reach the next group's partial sums
  // while others still read this one's.
  __shared__ float red[2][R][NT];
  __shared__ float ys[2][RB][NT];
  extern __shared__ uint4 q8_smem[];
  // Block and activation indices in 32 bits (indices_fit checks the matrix): 64-bit
  // address arithmetic took registers, and each register less a lane is more warps an SM.
  const int nb = static_cast<int>(w.cols / 32);
  const int cols = static_cast<int>(w.cols);
  Q8Act x = xg;
  constexpr int kStride = kWarp * SPLIT;
  constexpr int kUnroll = U;
  constexpr int kGroup = kUnroll * kStride;
  const int b0 = lane + kWarp * part;
  // A lane's blocks go in groups of kUnroll, each requested (predicated at the row's
  // end) before the previous group's arithmetic. The first group is requested before
  // waiting for the activations (pdl_wait): in the 8B model's matrices that is every
  // block a lane has (rows of 128 to 448 blocks shared by 32 to 128 lanes), so the whole
  // product's weights are in flight while the producer of x finishes. A block takes the
  // row groups blockIdx.x, + gridDim.x, ... < n_groups: the plain kernels one group each,
  // the fused ones as many as it takes for the grid to be one wave (each block quantizes
  // its input once), the next group's first blocks requested before this group's sums
  // are reduced.
  auto load_group = [&](WBlock* dst, int row, int nbr, int b) {
    const uint32_t base = static_cast<uint32_t>(row) * static_cast<uint32_t>(nb);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (b + u * kStride < nbr) dst[u] = load_block<T>(w, base + b + u * kStride);
  };
  int g = blockIdx.x;
  int r = g * RB + wi;
  bool active = r < w.rows;
  WBlock cur[kUnroll] = {};
  load_group(cur, r, active ? nb : 0, b0);
  pdl_wait();
  __shared__ __align__(16) unsigned long long in_slots[R][kNormSlots];
  input_scale_fetch(f, in_slots[warp]);
  x = prologue<PRO, R>(x, xin, cols, f, q8_smem);
  for (int it = 0; g < n_groups; g += gridDim.x, ++it) {
    const int nbr = active ? nb : 0;  // blocks this warp multiplies
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    for (int b = b0; b < nbr; b += kGroup) {
      WBlock next[kUnroll] = {};
      if (b + kGroup < nbr) load_group(next, r, nbr, b + kGroup);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (b + u * kStride < nbr)
          accumulate_block<T, NT, PRO>(acc, cur[u], x, b + u * kStride, n, nb, cols);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) cur[u] = next[u];
    }
    // The next group's first blocks, in flight while this one's sums are reduced (the
    // fused kernels only: the plain ones take one group).
    int rn = 0;
    bool active_n = false;
    if constexpr (PRO != Pro::kNone) {
      const int gn = g + gridDim.x;
      rn = gn * RB + wi;
      active_n = rn < w.rows && gn < n_groups;
      if (active_n) load_group(cur, rn, nb, b0);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = warp_sum(acc[t]);
    if constexpr (SPLIT > 1) {
      if (lane == 0)
#pragma unroll
        for (int t = 0; t < NT; ++t) red[it & 1][warp][t] = acc[t];
      __syncthreads();
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        acc[t] = 0.0f;
#pragma unroll
        for (int p = 0; p < SPLIT; ++p) acc[t] += red[it & 1][wi * SPLIT + p][t];
      }
    }
    if (f.in_ss) {
      const float in_s = input_scale(f, in_slots[warp]);
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[t] *= in_s;
    }
    finish_rows<EPI, RB, NT>(f, acc, ys[it & 1], active, part == 0 && lane == 0, wi, n, r, g,
                             w.rows, y, y_stride, accumulate);
    if constexpr (PRO == Pro::kNone) break;
    r = rn;
    active = active_n;
  }
}

template <DType T, int NT, int R, Pro PRO, GemvFusion::Kind EPI, int U>
void launch_u(const DeviceMatrix& w, const Q8Act& x, const void* xin, int n, float* y,
              int64_t y_stride, bool accumulate, int split, const GemvFusion& f,
              cudaStream_t stream) {
  const unsigned threads = R * kWarp;
  const size_t smem = PRO == Pro::kNone ? 0 : q8_smem_bytes(w.cols);
  auto go = [&](auto* k, int s) {
    const int64_t groups = blocks_for(w.rows, R / s);
    const int64_t grid =
        PRO == Pro::kNone ? groups : std::min(groups, resident_blocks(k, threads, smem));
    launch_dependent_smem(k, static_cast<unsigned>(grid), threads, smem, stream, w, x, xin, n, y,
                          y_stride, accumulate, groups, f);
  };
  if (PRO != Pro::kNone && split == 0) {
    // The fused kernels: as many warps a row as balance the groups over the one wave.
    split = fused_split(
        w.rows, R, resident_blocks(gemv_q8_kernel<T, NT, R, 1, PRO, EPI, U>, threads, smem), 4);
  }
  if (split == 1)
    go(gemv_q8_kernel<T, NT, R, 1, PRO, EPI, U>, 1);
  else if (split == 2)
    go(gemv_q8_kernel<T, NT, R, 2, PRO, EPI, U>, 2);
  else
    go(gemv_q8_kernel<T, NT, R, 4, PRO, EPI, U>, 4);
}

// U of every block type: 2, or 4 when set (CudaSwitches::q8_unroll, PAGODA_CUDA_Q8_UNROLL=4,
// kept for A/B runs; or the tests).
int q8_unroll() {
  return g_q8_unroll_override > 0 ? g_q8_unroll_override : 2;
}

template <DType T, int NT, int R, Pro PRO, GemvFusion::Kind EPI>
void launch_k(const DeviceMatrix& w, const Q8Act& x, const void* xin, int n, float* y,
              int64_t y_stride, bool accumulate, int split, const GemvFusion& f,
              cudaStream_t stream) {
  if (q8_unroll() == 4)
    launch_u<T, NT, R, PRO, EPI, 4>(w, x, xin, n, y, y_stride, accumulate, split, f, stream);
  else
    launch_u<T, NT, R, PRO, EPI, 2>(w, x, xin, n, y, y_stride, accumulate, split, f, stream);
}

// One warp per row, each lane with 4 or more blocks in flight, unless a row is long
// and the matrix has few rows: measured on the H200 (n = 1, 8B shapes), Q4_0 qkv
// 6144x4096 12.1 us with one warp against 15.1 with four, wo 4096x4096 10.6 against
// 12.8, but down 4096x14336 17.2 with four against 18.4 with one.
int split_for(const DeviceMatrix& w) {
  return g_q8_split_override > 0                ? g_q8_split_override
         : w.cols / 32 >= 256 && w.rows < 16384 ? 4
                                                : 1;
}

template <DType T>
void launch(const DeviceMatrix& w, const Q8Act& x, int n, float* y, int64_t y_stride,
            bool accumulate, cudaStream_t stream) {
  const int split = split_for(w);
  const GemvFusion none;
  if (n == 1)
    launch_k<T, 1, kRowsPerBlock, Pro::kNone, GemvFusion::kStore>(w, x, nullptr, n, y, y_stride,
                                                                  accumulate, split, none, stream);
  else
    launch_k<T, 8, kRowsPerBlock, Pro::kNone, GemvFusion::kStore>(w, x, nullptr, n, y, y_stride,
                                                                  accumulate, split, none, stream);
}

// Rows (warps) per block of the fused kernels: more rows share one prologue.
constexpr int kFusedRowsPerBlock = 16;

// The fused kernels: the input quantized in every block, then the product's store or
// its epilogue.
template <DType T>
Status launch_fused(const DeviceMatrix& w, const void* xin, float* y, bool accumulate,
                    const GemvFusion& f, cudaStream_t stream) {
  constexpr int R = kFusedRowsPerBlock;
  const int split = g_q8_split_override;  // 0: fused_split
  const Q8Act none;
  const bool norm = f.in_norm_w != nullptr;
  if (f.kind == GemvFusion::kRopeKv && norm)
    launch_k<T, 1, R, Pro::kNormQuant, GemvFusion::kRopeKv>(w, none, xin, 1, y, 0, false, split, f,
                                                            stream);
  else if (f.kind == GemvFusion::kRopeKv)
    launch_k<T, 1, R, Pro::kQuant, GemvFusion::kRopeKv>(w, none, xin, 1, y, 0, false, split, f,
                                                        stream);
  else if (norm)
    launch_k<T, 1, R, Pro::kNormQuant, GemvFusion::kStore>(w, none, xin, 1, y, 0, accumulate, split,
                                                           f, stream);
  else
    launch_k<T, 1, R, Pro::kQuant, GemvFusion::kStore>(w, none, xin, 1, y, 0, accumulate, split, f,
                                                       stream);
  return launch_status("gemv_q8_fused");
}

// The kernels index weight blocks in 32 bits, and load_block's byte offsets (up to 32
// bytes a block, Q8_0) are 32-bit products too, so a matrix holds fewer than 2^27 blocks
// (a 128256 x 16384 output matrix has 2^26).
bool indices_fit(const DeviceMatrix& w) {
  return w.rows < (int64_t{1} << 31) && w.cols < (int64_t{1} << 24) &&
         w.rows * (w.cols / 32) < (int64_t{1} << 27);
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

void set_gemv_q8_unroll_override(int unroll) {
  g_q8_unroll_override = unroll == 2 || unroll == 4 ? unroll : 0;
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
  if (!indices_fit(w)) return unsupported("gemv_q8: 2^27 or more blocks in one matrix");
  if (x.cols != w.cols) return invalid_argument("gemv_q8: activation width is not the matrix's");
  if (n < 1 || n > kGemvMaxTokens) return invalid_argument("gemv_q8: 1 to 8 tokens");
  const bool known = visit_q8_type(w.type, [&](auto t) {
    launch<decltype(t)::value>(w, x, n, y, y_stride, accumulate, stream);
  });
  if (!known) return unsupported("gemv_q8: weight type " + std::string(dtype_name(w.type)));
  return launch_status("gemv_q8");
}

// The prologue's copy and the static arrays must fit the 48 KiB of shared memory a block
// may have without asking.
constexpr size_t kFusedSmemMax = 46 * 1024;

bool gemv_q8_takes(const DeviceMatrix& w) {
  // The prologue reads 8 values per lane, 16-byte aligned.
  return is_q8_block_type(w.type) && w.cols % 32 == 0 && indices_fit(w) &&
         q8_smem_bytes(w.cols) <= kFusedSmemMax;
}

Status gemv_q8_fused(const DeviceMatrix& w, const void* x, float* y, bool accumulate,
                     const GemvFusion& f, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(f.in_norm_w) % 16 != 0)
    return invalid_argument("gemv_q8_fused: activations and norm weights must be 16-byte aligned");
  if (!indices_fit(w)) return unsupported("gemv_q8_fused: 2^27 or more blocks in one matrix");
  Status status = unsupported("gemv_q8_fused: weight type " + std::string(dtype_name(w.type)));
  visit_q8_type(w.type, [&](auto t) {
    // The cast: nvcc takes the assignment's Status& for a discarded [[nodiscard]] value.
    (void)(status = launch_fused<decltype(t)::value>(w, x, y, accumulate, f, stream));
  });
  return status;
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
