// Sampling on the GPU: one block per logit row applies the penalties, the temperature
// and the top-k / min-p / top-p filters, and draws a token with the host's uniform u,
// so only token ids leave the device (a 128k vocabulary is 0.5 MB of logits per row).
//
// No sort: each filter is a threshold on the tempered logit, found by a radix select
// over an order-preserving 32-bit key (4 rounds of 8 bits, each a shared-memory
// histogram of counts for top-k or of probability mass for top-p). The draw walks the
// kept tokens in index order: a block-wide scan of per-thread chunk masses finds the
// chunk that holds u * mass, and its thread walks it. Any fixed order gives an exact
// draw from the filtered distribution; the CPU sampler walks its own candidate order,
// so the two agree in distribution, not token for token (tests/cuda check the
// frequencies against the exact probabilities). Tokens tied with a threshold are all
// kept (the CPU breaks a top-k tie by index).
#include <cub/block/block_scan.cuh>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarp;

// Monotone map of floats to unsigned keys: a < b <=> key(a) < key(b) (no NaN here).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct Shared {
  float hist[kWarps][256];  // per-warp histograms (a warp's atomics do not cross warps)
  float red[kWarps];
  int32_t ired[kWarps];
  float total[256];
  uint32_t key;
  int32_t chosen;
};

__device__ float block_sum(float v, Shared& sh) {
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();
  if (lane == 0) sh.red[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < kWarps; ++w) s += sh.red[w];
  return s;
}

__device__ float block_max(float v, Shared& sh) {
  v = warp_max(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();
  if (lane == 0) sh.red[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sh.red[w]);
  return m;
}

// The largest key t with W({i : lo <= key_i, t <= key_i}) >= target, where W counts
// tokens (by_mass false) or sums exp(v_i - vmax) over the tempered logits v; `lo` when
// all of them together weigh less than target.
__device__ uint32_t select_threshold(const float* __restrict__ x, int n, float inv_t, float vmax,
                                     uint32_t lo, bool by_mass, float target, Shared& sh) {
  const int warp = threadIdx.x / kWarp;
  uint32_t prefix = 0;
  float above = 0.0f;  // weight of the kept tokens whose key is above the prefix so far
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kWarps * 256; i += kThreads) (&sh.hist[0][0])[i] = 0.0f;
    __syncthreads();
    const uint32_t high_mask = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float v = x[i] * inv_t;
      const uint32_t k = order_key(v);
      if (k < lo || (k & high_mask) != (prefix & high_mask)) continue;
      atomicAdd(&sh.hist[warp][(k >> shift) & 255u], by_mass ? expf(v - vmax) : 1.0f);
    }
    __syncthreads();
    if (threadIdx.x < 256) {
      float s = 0.0f;
      for (int w = 0; w < kWarps; ++w) s += sh.hist[w][threadIdx.x];
      sh.total[threadIdx.x] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int bin = -1;
      for (int b = 255; b >= 0; --b) {
        if (above + sh.total[b] >= target) {
          bin = b;
          break;
        }
        above += sh.total[b];
      }
      sh.chosen = bin;
    }
    __syncthreads();
    const int bin = sh.chosen;  // `above` is thread 0's alone
    if (bin < 0) return lo;     // every token together weighs less than target
    prefix |= static_cast<uint32_t>(bin) << shift;
    __syncthreads();
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(float* __restrict__ logits, int n_vocab, const SamplingRow* __restrict__ rows,
                  const int32_t* __restrict__ penalties, int32_t* __restrict__ out) {
  __shared__ Shared sh;
  float* x = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  const SamplingRow p = rows[blockIdx.x];
  const int tid = threadIdx.x;

  // Penalties, in place: the host lists each token once (its output count, and whether
  // it was seen at all for the repetition penalty), in the CPU sampler's order of effect.
  for (int i = tid; i < p.pen_count; i += kThreads) {
    const int32_t* e = penalties + 3 * (static_cast<int64_t>(p.pen_begin) + i);
    const int32_t t = e[0], count = e[1], seen = e[2];
    if (t < 0 || t >= n_vocab) continue;
    float v = x[t];
    if (seen && p.repetition_penalty != 1.0f)
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    if (count > 0) v -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    x[t] = v;
  }
  __syncthreads();

  if (p.temperature <= 0.0f || p.top_k == 1) {  // greedy: the first maximum
    float best = -INFINITY;
    int idx = n_vocab;
    for (int i = tid; i < n_vocab; i += kThreads)
      if (x[i] > best) best = x[i], idx = i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
      if (ob > best || (ob == best && oi < idx)) best = ob, idx = oi;
    }
    const int warp = tid / kWarp, lane = tid % kWarp;
    if (lane == 0) sh.red[warp] = best, sh.ired[warp] = idx;
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kWarps; ++w)
        if (sh.red[w] > best || (sh.red[w] == best && sh.ired[w] < idx))
          best = sh.red[w], idx = sh.ired[w];
      out[blockIdx.x] = idx < n_vocab ? idx : 0;
    }
    return;
  }

  const float inv_t = 1.0f / p.temperature;
  float m = -INFINITY;
  for (int i = tid; i < n_vocab; i += kThreads) m = fmaxf(m, x[i] * inv_t);
  const float vmax = block_max(m, sh);

  uint32_t lo = 0;
  if (p.top_k > 0 && p.top_k < n_vocab)
    lo = select_threshold(x, n_vocab, inv_t, vmax, 0, false, static_cast<float>(p.top_k), sh);
  // Softmax normaliser of the top-k set: top-p's fractions refer to it, as on the CPU.
  float z = 0.0f;
  for (int i = tid; i < n_vocab; i += kThreads) {
    const float v = x[i] * inv_t;
    if (order_key(v) >= lo) z += expf(v - vmax);
  }
  z = block_sum(z, sh);
  if (p.min_p > 0.0f) lo = max(lo, order_key(vmax + logf(p.min_p)));
  if (p.top_p < 1.0f) lo = select_threshold(x, n_vocab, inv_t, vmax, lo, true, p.top_p * z, sh);

  // The draw: thread t owns the contiguous chunk [t * chunk, (t + 1) * chunk).
  const int chunk = (n_vocab + kThreads - 1) / kThreads;
  const int i0 = min(n_vocab, tid * chunk), i1 = min(n_vocab, i0 + chunk);
  float mine = 0.0f;
  for (int i = i0; i < i1; ++i) {
    const float v = x[i] * inv_t;
    if (order_key(v) >= lo) mine += expf(v - vmax);
  }
  using Scan = cub::BlockScan<float, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  float before, total;
  Scan(scan_tmp).ExclusiveSum(mine, before, total);
  if (tid == 0) sh.chosen = -1;
  __syncthreads();
  const float target = static_cast<float>(p.u) * total;
  if (mine > 0.0f && before <= target && target < before + mine) {
    float acc = before;
    int pick = -1;
    for (int i = i0; i < i1; ++i) {
      const float v = x[i] * inv_t;
      if (order_key(v) < lo) continue;
      pick = i;  // the last kept token of the chunk if rounding runs past the end
      acc += expf(v - vmax);
      if (target < acc) break;
    }
    atomicMax(&sh.chosen, pick);  // one thread in exact arithmetic; any one is fine
  }
  __syncthreads();
  if (tid == 0) {
    int32_t c = sh.chosen;
    if (c < 0) {  // u * total fell past the last chunk by rounding: the last kept token
      for (int i = n_vocab - 1; i >= 0; --i)
        if (order_key(x[i] * inv_t) >= lo) {
          c = i;
          break;
        }
    }
    out[blockIdx.x] = c < 0 ? 0 : c;
  }
}

}  // namespace

Status sample_rows(float* logits, int n, int n_vocab, const SamplingRow* rows,
                   const int32_t* penalties, int32_t* out, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  sample_kernel<<<n, kThreads, 0, stream>>>(logits, n_vocab, rows, penalties, out);
  return launch_status("sample_rows");
}

}  // namespace pagoda::cuda
