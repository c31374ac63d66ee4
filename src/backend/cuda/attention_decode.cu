// Attention for single query rows (decode steps and short chunks), flash-decoding style:
// a block takes one row, the query heads of one KV head (GQA: K and V are read once for
// the whole group, four heads per pass) and one split of the context. Inside a block
// each group of LANES threads is an independent worker: it walks its own keys UNROLL at
// a time (K and V loads all issued before any is used), keeps its own online-softmax
// state and accumulators in registers, and never waits on the other groups until the
// end, where the block merges them. No shared memory or barrier sits in the key loop, so
// a batch of long contexts streams the KV cache near the memory bandwidth. Splits are
// merged by combine_kernel. Scores are kept in log2 units (exp2 is one instruction).
#include <algorithm>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/softmax_tile.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kHeadsPerPass = 4;
// Keys per worker step (2 x kUnroll 16-byte loads in flight per thread) and blocks per SM
// the registers are capped for. Measured on the H200 at 256 rows x 1,536 keys: (4, 4)
// 2.76 TB/s, (2, 4) 2.55, (4, 3) 2.36 (bench/RESULTS.md). An FP8 pool's loads are 8
// bytes, so it takes kFp8Unroll keys per step for the same bytes in flight.
constexpr int kUnroll = 4;
int g_fp8_unroll = 8;
bool g_tensor_cores = true;
constexpr int kMinBlocksPerSm = 4;
constexpr float kLog2e = 1.4426950408889634f;

// How a lane reads its 8 elements of one cached key or value, by pool type.
struct F16Kv {
  using Vec = uint4;  // 8 fp16
  __device__ static void unpack(const Vec u, float* f) { unpack8h(u, f); }
};
struct Fp8Kv {
  using Vec = uint2;  // 8 E4M3
  __device__ static void unpack(const Vec u, float* f) {
    const uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      __half2 lo, hi;
      fp8x4_to_half2x2(w[k], &lo, &hi);
      const float2 a = __half22float2(lo), c = __half22float2(hi);
      f[4 * k] = a.x;
      f[4 * k + 1] = a.y;
      f[4 * k + 2] = c.x;
      f[4 * k + 3] = c.y;
    }
  }
};

// Merges one head over a block's kGroups workers (worker kg's running max and sum, and
// its lane li's 8 accumulators) through shared memory, and writes the head's output or
// this split's partials. The whole block calls it.
template <int kGroups, int LANES>
__device__ __forceinline__ void merge_workers(float m_run, float l_run, const float* acc,
                                              float (*red_s)[8 * LANES], float* m_s, float* l_s,
                                              int kg, int li, int hd, float v_scale, int h,
                                              int64_t row, int n_heads, int wi, int split,
                                              int n_splits, void* out, ActType out_type,
                                              float* part) {
  __syncthreads();  // the previous head's merge is done with red_s
  if (li == 0) {
    m_s[kg] = m_run;
    l_s[kg] = l_run;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) red_s[kg][li * 8 + k] = acc[k];
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kGroups; ++w) m = fmaxf(m, m_s[w]);
  float l = 0.0f;
  for (int w = 0; w < kGroups; ++w)
    if (m_s[w] > -INFINITY) l += exp2f(m_s[w] - m) * l_s[w];
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kGroups; ++w)
      if (m_s[w] > -INFINITY) o += exp2f(m_s[w] - m) * red_s[w][d];
    write_head_output(o * v_scale, m, l, d, hd, h, row, n_heads, wi, split, n_splits, out, out_type,
                      part);
  }
}

// LANES threads share one key (8 dims each); a block holds kThreads / LANES workers, each
// taking UNROLL keys per step. The pool's scales fold into the score scale (K) and the
// output (V), so the loop converts stored values exactly.
template <int LANES, typename KV, int UNROLL>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    decode_kernel(const uint16_t* __restrict__ q, KvLayerView kv, DeviceBatch b,
                  const int32_t* __restrict__ rows, int n_heads, float scale, int n_splits,
                  void* __restrict__ out, ActType out_type, float* __restrict__ part) {
  pdl_trigger();
  pdl_wait();
  constexpr int kGroups = kThreads / LANES;  // workers per block
  __shared__ float red_s[kGroups][8 * LANES];
  __shared__ float m_s[kGroups], l_s[kGroups];

  const int wi = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int row = rows[wi];
  const int hd = kv.head_dim, bs = kv.block_size;
  const int group = n_heads / kv.n_kv_heads;
  const DecodeSplit sp = decode_split(b, row, split, n_splits);
  const int k_begin = sp.k_begin, n_keys = sp.n_keys;
  const int32_t* table = sp.table;
  const int tid = threadIdx.x, lane = tid % kWarp;
  const int kg = tid / LANES, li = tid % LANES;
  // The shuffles of a worker stay inside its LANES threads, whose trip counts may differ
  // from the other workers' in the same warp.
  const unsigned gmask =
      LANES == kWarp ? 0xffffffffu : ((1u << LANES) - 1u) << (lane / LANES * LANES);
  const int d0 = li * 8;
  const bool active = d0 < hd;
  const int64_t qd = static_cast<int64_t>(n_heads) * hd;
  const float scale2 = scale * kLog2e * kv.k_scale;
  using Vec = typename KV::Vec;
  const Vec* k_pool = static_cast<const Vec*>(kv.k);
  const Vec* v_pool = static_cast<const Vec*>(kv.v);

  for (int h0 = 0; h0 < group; h0 += kHeadsPerPass) {
    const int nh = min(kHeadsPerPass, group - h0);
    float qf[kHeadsPerPass][8];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) {
      if (active && hh < nh) {
        unpack8h(*reinterpret_cast<const uint4*>(q + row * qd + (g * group + h0 + hh) * hd + d0),
                 qf[hh]);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) qf[hh][k] = 0.0f;
      }
    }
    float m_run[kHeadsPerPass], l_run[kHeadsPerPass], acc[kHeadsPerPass][8];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) {
      m_run[hh] = -INFINITY;
      l_run[hh] = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[hh][k] = 0.0f;
    }

    // Worker kg takes runs of UNROLL consecutive keys, kGroups runs apart.
    for (int j0 = kg * UNROLL; j0 < n_keys; j0 += kGroups * UNROLL) {
      Vec kr[UNROLL], vr[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = j0 + u;
        kr[u] = vr[u] = Vec{};
        if (j < n_keys && active) {
          const int pos = k_begin + j;
          // In units of 8 elements (one Vec).
          const size_t base =
              (((static_cast<size_t>(table[pos / bs]) * kv.n_kv_heads + g) * bs + pos % bs) * hd +
               d0) /
              8;
          kr[u] = k_pool[base];
          vr[u] = v_pool[base];
        }
      }
      float sc[UNROLL][kHeadsPerPass];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        float kf[8];
        KV::unpack(kr[u], kf);
#pragma unroll
        for (int hh = 0; hh < kHeadsPerPass; ++hh) {
          float dot = 0.0f;
#pragma unroll
          for (int k = 0; k < 8; ++k) dot = fmaf(qf[hh][k], kf[k], dot);
#pragma unroll
          for (int o = LANES / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(gmask, dot, o);
          sc[u][hh] = j0 + u < n_keys ? dot * scale2 : -INFINITY;
        }
      }
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) {
        float mx = sc[0][hh];
#pragma unroll
        for (int u = 1; u < UNROLL; ++u) mx = fmaxf(mx, sc[u][hh]);
        const float alpha = online_max(m_run[hh], mx);  // key j0 is always in range
        l_run[hh] *= alpha;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[hh][k] *= alpha;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          const float p = exp2f(sc[u][hh] - m_run[hh]);
          l_run[hh] += p;
          float vf[8];
          KV::unpack(vr[u], vf);
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[hh][k] = fmaf(p, vf[k], acc[hh][k]);
        }
      }
    }

    // Merge the workers, one head at a time (hh is a compile-time index, guarded: a
    // run-time index would move the accumulators to local memory).
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) {
      if (hh >= nh) break;
      merge_workers<kGroups, LANES>(m_run[hh], l_run[hh], acc[hh], red_s, m_s, l_s, kg, li, hd,
                                    kv.v_scale, g * group + h0 + hh, row, n_heads, wi, split,
                                    n_splits, out, out_type, part);
    }
  }
}

// Merges the splits of one (row, head): rescales each partial sum to the common max
// (maxima in log2 units, as the decode kernels keep them). The first warp takes one split
// per lane, so the maxima and sums are read at once rather than one after another; the
// splits' outputs are then summed with all their reads independent.
static_assert(kMaxDecodeSplits <= kWarp, "combine_kernel takes a split per lane");
__global__ void combine_kernel(const float* __restrict__ part, const int32_t* __restrict__ rows,
                               int n_heads, int hd, int n_splits, void* __restrict__ out,
                               ActType out_type) {
  pdl_trigger();
  pdl_wait();
  const int wi = blockIdx.x, h = blockIdx.y;
  const float* pp = part + (static_cast<int64_t>(wi) * n_heads + h) * n_splits * (hd + 2);
  __shared__ float f_s[kWarp];  // each split's factor exp2(m_s - m); 0 for an empty one
  __shared__ float l_s;
  if (threadIdx.x < kWarp) {
    const int s = threadIdx.x;
    const float ms = s < n_splits ? pp[s * (hd + 2) + hd] : -INFINITY;
    const float ls = s < n_splits ? pp[s * (hd + 2) + hd + 1] : 0.0f;
    const float m = warp_max(ms);  // split 0 holds key 0, so m is finite
    const float f = ms > -INFINITY ? exp2f(ms - m) : 0.0f;
    const float l = warp_sum(f * ls);
    f_s[s] = f;
    if (s == 0) l_s = l;
  }
  __syncthreads();
  const float l = l_s;
  const int64_t row = rows[wi];
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll 8
    for (int s = 0; s < n_splits; ++s) {
      const float f = f_s[s], v = pp[s * (hd + 2) + d];
      o += f > 0.0f ? f * v : 0.0f;  // an empty split's partials are not read as numbers
    }
    store_act(out, out_type, row * n_heads * hd + static_cast<int64_t>(h) * hd + d, o / l);
  }
}

template <int LANES, typename KV, int UNROLL>
void launch(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
            const AttentionPlan& plan, int n_heads, float scale, int splits, void* out,
            ActType out_type, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.n_decode_rows), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(splits));
  launch_dependent(decode_kernel<LANES, KV, UNROLL>, grid, kThreads, stream, q, kv, b,
                   plan.decode_rows, n_heads, scale, splits, out, out_type,
                   static_cast<float*>(plan.workspace));
}

template <typename KV, int UNROLL>
void launch_lanes(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                  const AttentionPlan& plan, int n_heads, float scale, int splits, void* out,
                  ActType out_type, cudaStream_t stream) {
  const int hd = kv.head_dim;
  const int lanes = hd <= 8 ? 1 : hd <= 16 ? 2 : hd <= 32 ? 4 : hd <= 64 ? 8 : hd <= 128 ? 16 : 32;
  switch (lanes) {
    case 1:
      return launch<1, KV, UNROLL>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
    case 2:
      return launch<2, KV, UNROLL>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
    case 4:
      return launch<4, KV, UNROLL>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
    case 8:
      return launch<8, KV, UNROLL>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
    case 16:
      return launch<16, KV, UNROLL>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
    default:
      return launch<32, KV, UNROLL>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  }
}

}  // namespace

void set_decode_fp8_unroll(int keys) {
  g_fp8_unroll = keys == 4 ? 4 : 8;
}
void set_decode_tensor_cores(bool on) {
  g_tensor_cores = on;
}

Status decode_attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                        const AttentionPlan& plan, int n_heads, float scale, void* out,
                        ActType out_type, cudaStream_t stream) {
  const int hd = kv.head_dim;
  const int splits =
      plan.n_splits > 0 ? plan.n_splits : decode_splits(plan.n_decode_rows, kv.n_kv_heads);
  const size_t need = static_cast<size_t>(plan.n_decode_rows) * n_heads * splits * (hd + 2) * 4;
  if (splits > 1 && need > plan.workspace_bytes)
    return internal_error("attention workspace too small for the split-KV partials");
  const int group = n_heads / kv.n_kv_heads;
  if (g_tensor_cores && kv.type == KvType::kFp8E4M3 && has_decode_fp8_kernel(group, hd))
    PAGODA_RETURN_IF_ERROR(
        decode_attention_fp8(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream));
  else if (g_tensor_cores && kv.type == KvType::kF16 && has_decode_tc_kernel(group, hd))
    PAGODA_RETURN_IF_ERROR(
        decode_attention_tc(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream));
  else if (kv.type == KvType::kF16)
    launch_lanes<F16Kv, kUnroll>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  else if (g_fp8_unroll == 4)
    launch_lanes<Fp8Kv, 4>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  else
    launch_lanes<Fp8Kv, 8>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  PAGODA_RETURN_IF_ERROR(launch_status("decode_attention"));
  if (splits == 1) return Status::ok();
  const dim3 grid(static_cast<unsigned>(plan.n_decode_rows), static_cast<unsigned>(n_heads));
  launch_dependent(combine_kernel, grid, 128, stream, static_cast<const float*>(plan.workspace),
                   plan.decode_rows, n_heads, hd, splits, out, out_type);
  return launch_status("decode_attention_combine");
}

}  // namespace pagoda::cuda
