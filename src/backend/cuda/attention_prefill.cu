// Prefill attention on tensor cores, FlashAttention-2 style: a block takes 64 queries of
// one head of one sequence (16 per warp) and walks the sequence's keys in tiles of 64
// up to its last query's position. Scores and the output stay in registers in the
// mma.m16n8k16 fragment layout; the probabilities are repacked from the score
// fragments into operand fragments without leaving registers. K and V tiles are
// gathered from the paged cache through the block table with cp.async; keys past the
// context are zero-filled so no stale cache content reaches the sums. Fragment layouts:
// mma.cuh.
#include "backend/cuda/attention_impl.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/softmax_tile.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kBQ = 64;  // queries per block
constexpr int kBK = 64;  // keys per tile
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

// FP8: the pool holds E4M3 bytes, widened to fp16 as the tiles are loaded; the K scale
// is folded into scale_log2 and the V scale into the output.
template <int HD, bool FP8>
__global__ void __launch_bounds__(kThreads)
    prefill_kernel(const __half* __restrict__ q, KvLayerView kv, DeviceBatch b,
                   const int32_t* __restrict__ seqs, int n_heads, float scale_log2,
                   void* __restrict__ out, ActType out_type) {
  pdl_trigger();
  pdl_wait();
  constexpr int kStride = HD + 8;  // padded rows: ldmatrix rows fall in distinct banks
  constexpr int kChunks = HD / 8;  // 16-byte pieces per row
  extern __shared__ __align__(16) __half smem[];
  __half* q_s = smem;
  __half* k_s = q_s + kBQ * kStride;
  __half* v_s = k_s + kBK * kStride;

  const int seq = seqs[blockIdx.z];
  const int h = blockIdx.y;
  const int qt = gridDim.x - 1 - blockIdx.x;  // the longest tiles start first
  const int n_q = b.seq_n_q[seq];
  if (qt * kBQ >= n_q) return;
  const int q_row0 = b.seq_q_row[seq] + qt * kBQ;
  const int pos0 = b.seq_pos0[seq] + qt * kBQ;  // position of the tile's first query
  const int n_rows = min(kBQ, n_q - qt * kBQ);
  const int k_end = pos0 + n_rows;  // keys visible to the tile's last query
  const int g = h / (n_heads / kv.n_kv_heads);
  const int bs = kv.block_size;
  const int32_t* table = b.blocks + b.seq_blocks_off[seq];
  const int64_t qd = static_cast<int64_t>(n_heads) * HD;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int gr = lane / 4, gc = lane % 4;

  for (int i = tid; i < kBQ * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < n_rows;
    const __half* src = q + (static_cast<int64_t>(q_row0) + (valid ? r : 0)) * qd + h * HD + c * 8;
    cp_async16(q_s + r * kStride + c * 8, src, valid);
  }
  cp_async_wait_all();
  __syncthreads();

  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int mi = lane / 8;
    const int r = warp * 16 + (mi & 1) * 8 + lane % 8;
    ldmatrix_x4(qf[ks], q_s + r * kStride + ks * 16 + (mi >> 1) * 8);
  }
  // Positions of this thread's two rows; padding rows act as the last real one.
  const int qp0 = pos0 + min(warp * 16 + gr, n_rows - 1);
  const int qp1 = pos0 + min(warp * 16 + gr + 8, n_rows - 1);

  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int kv0 = 0; kv0 < k_end; kv0 += kBK) {
    for (int i = tid; i < kBK * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int pos = kv0 + r;
      const bool valid = pos < k_end;
      const int p = valid ? pos : 0;
      const size_t base =
          ((static_cast<size_t>(table[p / bs]) * kv.n_kv_heads + g) * bs + p % bs) * HD + c * 8;
      if constexpr (!FP8) {
        cp_async16(k_s + r * kStride + c * 8, static_cast<const __half*>(kv.k) + base, valid);
        cp_async16(v_s + r * kStride + c * 8, static_cast<const __half*>(kv.v) + base, valid);
      } else {
        // 8 E4M3 bytes widened to 8 fp16 (exact; the scales are applied outside).
        const uint2 kb =
            valid ? *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(kv.k) + base)
                  : make_uint2(0, 0);
        const uint2 vb =
            valid ? *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(kv.v) + base)
                  : make_uint2(0, 0);
        *reinterpret_cast<uint4*>(k_s + r * kStride + c * 8) = fp8x8_to_half8(kb);
        *reinterpret_cast<uint4*>(v_s + r * kStride + c * 8) = fp8x8_to_half8(vb);
      }
    }
    if constexpr (!FP8) cp_async_wait_all();
    __syncthreads();

    // S = Q K^T for this warp's 16 rows and the tile's 64 keys.
    float s[kBK / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBK / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    qk_tile<HD, kBK>(s, qf, k_s, kStride, lane);
    // Scale into log2 units and mask the future. Every row sees key 0 in the first
    // tile, so its maximum is finite from then on.
#pragma unroll
    for (int nt = 0; nt < kBK / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = kv0 + nt * 8 + 2 * gc + e;
        s[nt][e] = key <= qp0 ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][2 + e] = key <= qp1 ? s[nt][2 + e] * scale_log2 : -INFINITY;
      }
    }
    softmax_tile_m16<kBK, HD>(s, o, m0, m1, l0, l1);
    pv_tile_m16<kBK, HD>(o, s, v_s, kStride, lane);
    __syncthreads();  // k_s and v_s are refilled next
  }

  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  const float inv0 = kv.v_scale / l0, inv1 = kv.v_scale / l1;
  const int r0 = warp * 16 + gr, r1 = r0 + 8;
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    const int d = h * HD + dt * 8 + 2 * gc;
    if (r0 < n_rows) {
      const int64_t i = (static_cast<int64_t>(q_row0) + r0) * qd + d;
      store_act(out, out_type, i, o[dt][0] * inv0);
      store_act(out, out_type, i + 1, o[dt][1] * inv0);
    }
    if (r1 < n_rows) {
      const int64_t i = (static_cast<int64_t>(q_row0) + r1) * qd + d;
      store_act(out, out_type, i, o[dt][2] * inv1);
      store_act(out, out_type, i + 1, o[dt][3] * inv1);
    }
  }
}

template <int HD, bool FP8>
Status launch(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
              const AttentionPlan& plan, int n_heads, float scale, void* out, ActType out_type,
              cudaStream_t stream) {
  constexpr size_t kSmem = static_cast<size_t>(kBQ + 2 * kBK) * (HD + 8) * sizeof(__half);
  static bool configured = false;  // the attribute is per function, set once per process
  if (!configured) {
    PAGODA_CUDA_TRY(cudaFuncSetAttribute(prefill_kernel<HD, FP8>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmem)));
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>((plan.max_prefill_q + kBQ - 1) / kBQ),
                  static_cast<unsigned>(n_heads), static_cast<unsigned>(plan.n_prefill_seqs));
  launch_dependent_smem(prefill_kernel<HD, FP8>, grid, kThreads, kSmem, stream,
                        reinterpret_cast<const __half*>(q), kv, b, plan.prefill_seqs, n_heads,
                        scale * kLog2e * kv.k_scale, out, out_type);
  return launch_status("prefill_attention");
}

template <bool FP8>
Status launch_head(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                   const AttentionPlan& plan, int n_heads, float scale, void* out, ActType out_type,
                   cudaStream_t stream) {
  if (kv.head_dim == 64)
    return launch<64, FP8>(q, kv, b, plan, n_heads, scale, out, out_type, stream);
  if (kv.head_dim == 128)
    return launch<128, FP8>(q, kv, b, plan, n_heads, scale, out, out_type, stream);
  return unsupported("prefill attention: head size");
}

}  // namespace

Status prefill_attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                         const AttentionPlan& plan, int n_heads, float scale, void* out,
                         ActType out_type, cudaStream_t stream) {
  if (kv.type == KvType::kFp8E4M3)
    return launch_head<true>(q, kv, b, plan, n_heads, scale, out, out_type, stream);
  return launch_head<false>(q, kv, b, plan, n_heads, scale, out, out_type, stream);
}

}  // namespace pagoda::cuda
