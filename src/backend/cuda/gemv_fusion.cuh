// Device side of GemvFusion (kernels.h): what the matrix-vector kernels (gemv.cu,
// gemv_q8.cu) do after their products, and the RoPE and KV-slot helpers they share with
// rope_kv.cu (so the fused and the separate paths round alike).
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"

namespace pagoda::cuda {

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

// The scale of a product whose input is a norm's un-normalised output (GemvFusion::in_ss).
// Each lane copies a slot into the warp's shared `slots` (kNormSlots) with cp.async right
// after pdl_wait, through L1 (every warp of the grid reads the same slots: through L2
// alone they queued at its slices), and the slots are summed once the product's loop is
// done: a value held in a register over the loop, or summed before it, made the
// 32-register kernels spill, and a load at the end put an L2 round trip on every tail.
__device__ __forceinline__ void input_scale_fetch(const GemvFusion& f, unsigned long long* slots) {
  static_assert(kNormSlots == kWarp, "a slot a lane");
  const int lane = threadIdx.x % kWarp;
  if (f.in_ss)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_addr(slots + lane)),
                 "l"(f.in_ss + lane * kNormSlotStride));
}
// As rms_norm_kernel: 1 / sqrt(mean square + eps), the mean in double; 1 without in_ss.
__device__ __forceinline__ float input_scale(const GemvFusion& f, const unsigned long long* slots) {
  if (!f.in_ss) return 1.0f;
  cp_async_wait_all();
  __syncwarp();
  unsigned long long v = slots[threadIdx.x % kWarp];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const double ss = static_cast<double>(v) / kNormFixed;
  return 1.0f / sqrtf(static_cast<float>(ss / f.in_dim) + f.in_eps);
}

// Row r of the residual, y, as the next norm's input (GemvFusion::norm_out) and its
// square into the norm's sums.
__device__ __forceinline__ void norm_out_row(const GemvFusion& f, int64_t r, float y) {
  store_act(f.norm_out, f.norm_out_type, r, y * f.norm_w[r]);
  const unsigned long long sq = __double2ull_rn(static_cast<double>(y * y) * kNormFixed);
  atomicAdd(f.norm_ss + r % kNormSlots * kNormSlotStride, sq);
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
        const float v = accumulate ? *dst + acc[t] : acc[t];
        *dst = v;
        if (f.norm_ss) norm_out_row(f, r, v);  // one token (gemv_takes)
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
