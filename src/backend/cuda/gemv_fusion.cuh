// Device side of GemvFusion (kernels.h): what the matrix-vector kernels (gemv.cu,
// gemv_q8.cu) do after their products, the RoPE and KV-slot helpers they share with
// rope_kv.cu (so the fused and the separate paths round alike), and the grid of a kernel
// whose blocks loop over the work.
#pragma once

#include <algorithm>

#include "backend/cuda/common.cuh"

namespace pagoda::cuda {

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

// How many blocks of `kernel` the whole GPU holds at once: the grid of a kernel whose
// blocks loop over the work (one wave).
template <typename Kernel>
int64_t resident_blocks(Kernel* kernel, int threads, size_t smem) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess)
    per_sm = 1;
  return static_cast<int64_t>(std::max(per_sm, 1)) * sm_count();
}

// One rotated element of the pair (va, vb) by the angle with cosine c and sine s: the
// first (first) or the second. Explicit roundings: no fused multiply-add, as on the CPU.
__device__ __forceinline__ float rope_rotate(float c, float s, float va, float vb, bool first) {
  return first ? __fsub_rn(__fmul_rn(va, c), __fmul_rn(vb, s))
               : __fadd_rn(__fmul_rn(va, s), __fmul_rn(vb, c));
}

// Writes element d of KV head h of batch row `row` (K when is_k, else V) into its slot.
__device__ __forceinline__ void kv_store(const KvLayerView& kv, const DeviceBatch& b, int row,
                                         bool is_k, int h, int d, float val) {
  const int pos = b.row_pos[row];
  const int seq = b.row_seq[row];
  const int32_t block = b.blocks[b.seq_blocks_off[seq] + pos / kv.block_size];
  const size_t off =
      ((static_cast<size_t>(block) * kv.n_kv_heads + h) * kv.block_size + pos % kv.block_size) *
          kv.head_dim +
      d;
  void* pool = is_k ? kv.k : kv.v;
  if (kv.type == KvType::kF16) {
    static_cast<__half*>(pool)[off] = __float2half_rn(val);
  } else {
    // Divided, not multiplied by a reciprocal, so the byte is the correctly rounded
    // quotient whatever the scale.
    const float scale = is_k ? kv.k_scale : kv.v_scale;
    static_cast<__nv_fp8_storage_t*>(pool)[off] =
        __nv_cvt_float_to_fp8(__fdiv_rn(val, scale), __NV_SATFINITE, __NV_E4M3);
  }
}

// Row r of batch row t's qkv (v: its product, partner: row r ^ 1's; adjacent-pair RoPE)
// to q_out or the KV pool, as rope_qkv_kernel does it.
__device__ __forceinline__ void fused_rope_kv_row(const GemvFusion& f, int t, int r, float v,
                                                  float partner) {
  const RopeParams& p = f.rope;
  const int hd = p.head_dim, qd = p.n_heads * hd, kvd = p.n_kv_heads * hd;
  const int part = r < qd ? 0 : r < qd + kvd ? 1 : 2;
  const int base = part == 0 ? 0 : part == 1 ? qd : qd + kvd;
  const int h = (r - base) / hd, d = (r - base) % hd;
  float val = f.bias ? __fadd_rn(v, f.bias[r]) : v;
  if (part < 2 && d < 2 * p.n_pairs) {
    const float pv = f.bias ? __fadd_rn(partner, f.bias[r ^ 1]) : partner;
    const float2 cs =
        reinterpret_cast<const float2*>(f.cs)[static_cast<int64_t>(t) * p.n_pairs + d / 2];
    const bool first = d % 2 == 0;
    val = rope_rotate(cs.x, cs.y, first ? val : pv, first ? pv : val, first);
  }
  if (part == 0)
    reinterpret_cast<__half*>(f.q_out)[static_cast<int64_t>(t) * qd + r] = __float2half_rn(val);
  else
    kv_store(f.kv, f.batch, t, part == 1, h, d, val);
}

// Warps a row (1, 2, 4 ... up to max_split) for a fused kernel's `rows` rows in groups
// of R / split over `blocks` resident blocks: the fewest whole groups a block takes,
// divided by the warps on each row (a block's time), the smallest wins; ties go to
// fewer warps a row (fewer partial sums to meet).
inline int fused_split(int64_t rows, int R, int64_t blocks, int max_split) {
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

// The epilogue of block `blk` once ys[i][t] holds row blk * RB + i's result for token t
// (all threads of the block, after a __syncthreads).
template <GemvFusion::Kind EPI, int RB, int NT>
__device__ __forceinline__ void fused_epilogue(const GemvFusion& f, const float (*ys)[NT], int n,
                                               int64_t blk, int64_t rows) {
  if constexpr (EPI == GemvFusion::kRopeKv) {
    for (int j = threadIdx.x; j < RB * NT; j += blockDim.x) {
      const int i = j % RB, t = j / RB;
      const int64_t r = blk * RB + i;
      if (t < n && r < rows) fused_rope_kv_row(f, t, static_cast<int>(r), ys[i][t], ys[i ^ 1][t]);
    }
  }
}

// The end of a matrix-vector block once each row's warps have met: `lead` (a row's first
// lane) holds acc[t] for row r (warp-row wi of block blk), which goes to y (kStore: all
// threads may call, only active leads store) or, through ys and a __syncthreads of the
// whole block, to the epilogue.
template <GemvFusion::Kind EPI, int RB, int NT>
__device__ __forceinline__ void finish_rows(const GemvFusion& f, const float* acc, float (*ys)[NT],
                                            bool active, bool lead, int wi, int n, int64_t r,
                                            int64_t blk, int64_t rows, float* y, int64_t y_stride,
                                            bool accumulate) {
  if constexpr (EPI == GemvFusion::kStore) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (active && lead && t < n) {
        float* dst = y + t * y_stride + r;
        *dst = accumulate ? *dst + acc[t] : acc[t];
      }
    }
  } else {
    if (lead)
#pragma unroll
      for (int t = 0; t < NT; ++t) ys[wi][t] = acc[t];
    __syncthreads();
    fused_epilogue<EPI, RB, NT>(f, ys, n, blk, rows);
  }
}

}  // namespace pagoda::cuda
