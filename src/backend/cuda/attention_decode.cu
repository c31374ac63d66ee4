// Attention for single query rows (decode steps and short chunks), flash-decoding style:
// a block takes one row, the query heads of one KV head (GQA: K and V are read once for
// the whole group, four heads per pass) and one split of the context. Keys come in tiles
// of kTile: scores into shared memory, an online-softmax update per head, then the tile's
// values weighted into per-thread accumulators. Splits are merged by combine_kernel.
#include <algorithm>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kHeadsPerPass = 4;  // one warp per head in the softmax step
constexpr int kTile = 256;        // keys per tile
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ void load8h(const uint16_t* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
    f[2 * k] = v.x;
    f[2 * k + 1] = v.y;
  }
}

// LANES threads share one key (8 dims each); kThreads / LANES keys are handled at once.
template <int LANES>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const uint16_t* __restrict__ q, KvLayerView kv, DeviceBatch b,
                  const int32_t* __restrict__ rows, int n_heads, float scale, int n_splits,
                  void* __restrict__ out, ActType out_type, float* __restrict__ part) {
  pdl_trigger();
  constexpr int kGroups = kThreads / LANES;  // keys in flight per step
  __shared__ float q_s[kHeadsPerPass][kMaxHeadDim];
  __shared__ float s_s[kHeadsPerPass][kTile];
  __shared__ float alpha_s[kHeadsPerPass];
  __shared__ float red_s[kGroups][8 * LANES];

  const int wi = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int row = rows[wi];
  const int hd = kv.head_dim, bs = kv.block_size;
  const int group = n_heads / kv.n_kv_heads;
  const int seq = b.row_seq[row];
  const int ctx = b.row_pos[row] + 1;
  // This row's share of its context (later splits of a short context are empty).
  const int chunk = max(kDecodeMinChunk, ((ctx + n_splits - 1) / n_splits + 15) & ~15);
  const int k_begin = split * chunk, k_end = min(ctx, k_begin + chunk);
  const int32_t* table = b.blocks + b.seq_blocks_off[seq];
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int kg = tid / LANES, li = tid % LANES;
  const int d0 = li * 8;
  const bool active = d0 < hd;
  const int64_t qd = static_cast<int64_t>(n_heads) * hd;

  for (int h0 = 0; h0 < group; h0 += kHeadsPerPass) {
    const int nh = min(kHeadsPerPass, group - h0);
    __syncthreads();  // the previous pass is done with q_s / red_s
    for (int i = tid; i < kHeadsPerPass * hd; i += kThreads) {
      const int hh = i / hd, d = i % hd;
      q_s[hh][d] =
          hh < nh ? half_bits_to_float(q[row * qd + (g * group + h0 + hh) * hd + d]) : 0.0f;
    }
    float m_run = -INFINITY, l_run = 0.0f;  // per head, kept by warp hh
    float acc[kHeadsPerPass][8];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh)
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[hh][k] = 0.0f;
    __syncthreads();

    for (int t0 = k_begin; t0 < k_end; t0 += kTile) {
      const int nt = min(kTile, k_end - t0);
      // Scores of this tile (whole warps take part in the shuffles, so the loop bound is
      // the tile rounded up to all key groups).
      const int nt_round = (nt + kGroups - 1) / kGroups * kGroups;
      for (int j = kg; j < nt_round; j += kGroups) {
        float dot[kHeadsPerPass] = {0, 0, 0, 0};
        if (j < nt && active) {
          const int pos = t0 + j;
          const size_t base =
              ((static_cast<size_t>(table[pos / bs]) * kv.n_kv_heads + g) * bs + pos % bs) * hd;
          float kf[8];
          load8h(kv.k + base + d0, kf);
#pragma unroll
          for (int hh = 0; hh < kHeadsPerPass; ++hh)
#pragma unroll
            for (int k = 0; k < 8; ++k) dot[hh] = fmaf(q_s[hh][d0 + k], kf[k], dot[hh]);
        }
#pragma unroll
        for (int hh = 0; hh < kHeadsPerPass; ++hh) {
#pragma unroll
          for (int o = LANES / 2; o > 0; o >>= 1)
            dot[hh] += __shfl_xor_sync(0xffffffffu, dot[hh], o);
          if (li == 0 && j < nt) s_s[hh][j] = dot[hh] * scale;
        }
      }
      __syncthreads();
      // Online softmax: warp hh owns head hh.
      if (warp < nh) {
        float mx = -INFINITY;
        for (int j = lane; j < nt; j += kWarp) mx = fmaxf(mx, s_s[warp][j]);
        mx = warp_max(mx);
        const float m_new = fmaxf(m_run, mx);
        float sum = 0.0f;
        for (int j = lane; j < nt; j += kWarp) {
          const float p = expf(s_s[warp][j] - m_new);
          s_s[warp][j] = p;
          sum += p;
        }
        sum = warp_sum(sum);
        const float alpha = expf(m_run - m_new);  // 0 on the first tile
        l_run = l_run * alpha + sum;
        m_run = m_new;
        if (lane == 0) alpha_s[warp] = alpha;
      }
      __syncthreads();
      // Weighted values.
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) {
        const float a = hh < nh ? alpha_s[hh] : 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[hh][k] *= a;
      }
      if (active) {
        for (int j = kg; j < nt; j += kGroups) {
          const int pos = t0 + j;
          const size_t base =
              ((static_cast<size_t>(table[pos / bs]) * kv.n_kv_heads + g) * bs + pos % bs) * hd;
          float vf[8];
          load8h(kv.v + base + d0, vf);
#pragma unroll
          for (int hh = 0; hh < kHeadsPerPass; ++hh) {
            const float p = s_s[hh][j];
#pragma unroll
            for (int k = 0; k < 8; ++k) acc[hh][k] = fmaf(p, vf[k], acc[hh][k]);
          }
        }
      }
      __syncthreads();  // s_s is rewritten by the next tile
    }

    // Sum the key groups' accumulators, one head at a time.
    __shared__ float l_s[kHeadsPerPass], m_s[kHeadsPerPass];
    if (warp < nh && lane == 0) {
      l_s[warp] = l_run;
      m_s[warp] = m_run;
    }
    // hh is a compile-time index (unrolled, guarded): a run-time index would move the
    // accumulators to local memory.
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) {
      if (hh >= nh) break;
#pragma unroll
      for (int k = 0; k < 8; ++k) red_s[kg][li * 8 + k] = acc[hh][k];
      __syncthreads();
      for (int d = tid; d < hd; d += kThreads) {
        float o = 0.0f;
        for (int k = 0; k < kGroups; ++k) o += red_s[k][d];
        const int h = g * group + h0 + hh;
        if (n_splits == 1) {
          store_act(out, out_type, row * qd + static_cast<int64_t>(h) * hd + d,
                    l_s[hh] > 0 ? o / l_s[hh] : 0.0f);
        } else {
          float* pp =
              part + ((static_cast<int64_t>(wi) * n_heads + h) * n_splits + split) * (hd + 2);
          pp[d] = o;
          if (d == 0) {
            pp[hd] = m_s[hh];
            pp[hd + 1] = l_s[hh];
          }
        }
      }
      __syncthreads();
    }
  }
}

// Merges the splits of one (row, head): rescales each partial sum to the common max.
__global__ void combine_kernel(const float* __restrict__ part, const int32_t* __restrict__ rows,
                               int n_heads, int hd, int n_splits, void* __restrict__ out,
                               ActType out_type) {
  pdl_trigger();
  const int wi = blockIdx.x, h = blockIdx.y;
  const float* pp = part + (static_cast<int64_t>(wi) * n_heads + h) * n_splits * (hd + 2);
  float m = -INFINITY;
  for (int s = 0; s < n_splits; ++s) m = fmaxf(m, pp[s * (hd + 2) + hd]);
  float l = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    const float ms = pp[s * (hd + 2) + hd];
    if (ms > -INFINITY) l += expf(ms - m) * pp[s * (hd + 2) + hd + 1];
  }
  const int64_t row = rows[wi];
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      const float ms = pp[s * (hd + 2) + hd];
      if (ms > -INFINITY) o += expf(ms - m) * pp[s * (hd + 2) + d];
    }
    store_act(out, out_type, row * n_heads * hd + static_cast<int64_t>(h) * hd + d, o / l);
  }
}

template <int LANES>
void launch(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
            const AttentionPlan& plan, int n_heads, float scale, int splits, void* out,
            ActType out_type, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.n_decode_rows), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(splits));
  decode_kernel<LANES><<<grid, kThreads, 0, stream>>>(q, kv, b, plan.decode_rows, n_heads, scale,
                                                      splits, out, out_type,
                                                      static_cast<float*>(plan.workspace));
}

}  // namespace

Status decode_attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                        const AttentionPlan& plan, int n_heads, float scale, void* out,
                        ActType out_type, cudaStream_t stream) {
  const int hd = kv.head_dim;
  const int splits =
      plan.n_splits > 0 ? plan.n_splits : decode_splits(plan.n_decode_rows, kv.n_kv_heads);
  const size_t need = static_cast<size_t>(plan.n_decode_rows) * n_heads * splits * (hd + 2) * 4;
  if (splits > 1 && need > plan.workspace_bytes)
    return internal_error("attention workspace too small for the split-KV partials");
  const int lanes = hd <= 8 ? 1 : hd <= 16 ? 2 : hd <= 32 ? 4 : hd <= 64 ? 8 : hd <= 128 ? 16 : 32;
  switch (lanes) {
    case 1:
      launch<1>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
      break;
    case 2:
      launch<2>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
      break;
    case 4:
      launch<4>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
      break;
    case 8:
      launch<8>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
      break;
    case 16:
      launch<16>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
      break;
    default:
      launch<32>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
      break;
  }
  PAGODA_RETURN_IF_ERROR(launch_status("decode_attention"));
  if (splits == 1) return Status::ok();
  const dim3 grid(static_cast<unsigned>(plan.n_decode_rows), static_cast<unsigned>(n_heads));
  combine_kernel<<<grid, 128, 0, stream>>>(static_cast<const float*>(plan.workspace),
                                           plan.decode_rows, n_heads, hd, splits, out, out_type);
  return launch_status("decode_attention_combine");
}

}  // namespace pagoda::cuda
