// Decode attention over an FP8 KV pool on tensor cores, with the keys as the mma's M side:
// S^T = K Q^T and O^T += V^T P^T. A block takes one query row, the query heads of one
// KV head (GQA: up to 8 heads fill the 8 columns of one n tile, up to 16 two) and one
// split of the context; each of its four warps walks its own tiles of 32 keys with its
// own online-softmax state, and the warps are merged through shared memory at the end.
//
// Why keys on M: a Llama group has 4 heads. With heads on M (attention_decode_tc.cu),
// an mma's 16 rows hold 4 real ones, so 3/4 of the accumulators and products are
// padding; with heads on N, 8 columns hold 4. Half the products and half the output
// registers, so more warps fit an SM: that kernel, at 163 registers and 3 blocks an SM,
// was bound by latency (no eligible warp in 69% of cycles; bench/RESULTS.md, stop 13).
//
// Operands come straight from the staged bytes, widened in registers:
// - K as A (16 keys x 16 dims): Q's and K's head dimensions are permuted alike so that a
//   thread's k indices of four steps are 16 consecutive bytes of one key;
// - V^T as A (16 dims x 16 keys): m tile i's rows gr and gr+8 are dimensions
//   gr*HD/8 + 2i and +1, so a thread reads HD/8 consecutive bytes of each of its keys
//   and __byte_perm pairs two keys' bytes for one conversion;
// - P^T as B (16 keys x 8 heads): the S^T accumulators rounded to fp16 are the 8x8
//   fragments of P, and movmatrix.trans turns them into P^T's.
// Tiles are gathered from the paged cache with cp.async into two buffers per warp, the
// next tile requested before the current one is used; each lane finds one key's pool
// slot (a block-table entry a tile ahead) and the warp shares the slots by shuffles.
#include "backend/cuda/attention_impl.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/softmax_tile.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTileKeys = 32;  // keys per warp tile: two m tiles
constexpr float kLog2e = 1.4426950408889634f;

template <int HD, int NT>
constexpr size_t smem_bytes() {
  const size_t stage = static_cast<size_t>(kWarps) * 2 * 2 * kTileKeys * HD;  // [warp][buf][K,V]
  const size_t merge = static_cast<size_t>(kWarps) * 8 * NT * (HD + 2) * sizeof(float);
  return stage > merge ? stage : merge;
}

// Staged K rows of 128 bytes: odd keys keep their two 64-byte halves swapped, so the
// 16-byte reads of a quarter warp (two keys, four pieces each) fall in distinct banks.
template <int HD>
__device__ __forceinline__ int k_chunk(int key, int chunk) {
  return HD == 128 ? chunk ^ ((key & 1) << 2) : chunk;
}
// Staged V rows: a quarter warp reads keys 2c (+const) for c = 0..3 at pieces gr = 0, 1
// (HD 128), so bits 1-2 of the key move the piece within the row. HD 64 rows are 64
// bytes and keep a 2-way conflict.
template <int HD>
__device__ __forceinline__ int v_chunk(int key, int chunk) {
  return HD == 128 ? chunk ^ (((key >> 1) & 3) << 1) : chunk ^ ((key >> 1) & 3);
}

__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// NT n tiles of 8 heads (a group of up to 8 * NT). Registers are capped so that
// kMinBlocks blocks fit an SM.
template <int NT>
constexpr int min_blocks() {
  return NT == 1 ? 5 : 3;
}

// Q^T as B fragments, head nt*8 + gr (q_heads: the KV head's first query head): in step
// ks the thread's k indices (2gc, 2gc+1, 2gc+8, 2gc+9) are dimensions base..base+3,
// base = (ks/4)*64 + gc*16 + (ks%4)*4, so one 16-byte read of a staged K row serves four
// steps.
template <int HD, int NT>
__device__ __forceinline__ void load_q_t(uint32_t (*qf)[HD / 16][2], const __half* q_heads,
                                         int group, int gr, int gc) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int h = nt * 8 + gr;
#pragma unroll
    for (int g64 = 0; g64 < HD / 64; ++g64) {
      uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
      if (h < group) {
        const uint4* src = reinterpret_cast<const uint4*>(q_heads + static_cast<int64_t>(h) * HD +
                                                          g64 * 64 + gc * 16);
        v0 = src[0];
        v1 = src[1];
      }
      const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        qf[nt][g64 * 4 + st][0] = w[2 * st];
        qf[nt][g64 * 4 + st][1] = w[2 * st + 1];
      }
    }
  }
}

// S^T = K Q^T over a staged tile: s[mt][nt] holds keys mt*16 + gr (c0, c1) and + 8 (c2,
// c3) for heads nt*8 + 2gc (+1).
template <int HD, int NT>
__device__ __forceinline__ void tile_scores(float (*s)[NT][4], const uint32_t (*qf)[HD / 16][2],
                                            const uint8_t* k8, int gr, int gc) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const int key0 = mt * 16 + gr, key1 = key0 + 8;
#pragma unroll
    for (int g64 = 0; g64 < HD / 64; ++g64) {
      const uint4 w0 =
          *reinterpret_cast<const uint4*>(k8 + key0 * HD + k_chunk<HD>(key0, g64 * 4 + gc) * 16);
      const uint4 w1 =
          *reinterpret_cast<const uint4*>(k8 + key1 * HD + k_chunk<HD>(key1, g64 * 4 + gc) * 16);
      const uint32_t r0[4] = {w0.x, w0.y, w0.z, w0.w}, r1[4] = {w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        uint32_t a[4];
        fp8x4_to_b16x2(r0[st], &a[0], &a[2]);
        fp8x4_to_b16x2(r1[st], &a[1], &a[3]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          mma16816(s[mt][nt], a, qf[nt][g64 * 4 + st][0], qf[nt][g64 * 4 + st][1]);
      }
    }
  }
}

// Scales the tile's scores to log2 units, masks keys n_valid and past, and folds them into
// each head's running (m, l) (online_softmax: softmax_tile.cuh); leaves the probabilities
// in s and rescales the output o unless no maximum moved in the warp.
template <int HD, int NT>
__device__ __forceinline__ void tile_softmax(float (*s)[NT][4], float (*o)[NT][4], float (*m)[2],
                                             float (*l)[2], int n_valid, float scale_log2, int gr) {
  constexpr int kSteps = HD / 16;
  float mx[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) mx[nt][0] = mx[nt][1] = -INFINITY;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const bool v0 = mt * 16 + gr < n_valid, v1 = mt * 16 + gr + 8 < n_valid;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float* c = s[mt][nt];
      c[0] = v0 ? c[0] * scale_log2 : -INFINITY;
      c[1] = v0 ? c[1] * scale_log2 : -INFINITY;
      c[2] = v1 ? c[2] * scale_log2 : -INFINITY;
      c[3] = v1 ? c[3] * scale_log2 : -INFINITY;
      mx[nt][0] = fmaxf(mx[nt][0], fmaxf(c[0], c[2]));
      mx[nt][1] = fmaxf(mx[nt][1], fmaxf(c[1], c[3]));
    }
  }
  // A head's keys are spread over the lanes of one gc.
  float a[NT][2];
  bool moved = false;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int off = 4; off < kWarp; off <<= 1)
        mx[nt][e] = fmaxf(mx[nt][e], __shfl_xor_sync(0xffffffffu, mx[nt][e], off));
      a[nt][e] = online_max(m[nt][e], mx[nt][e]);  // the tile's key 0 is in range
      moved = moved || a[nt][e] != 1.0f;
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      float* c = s[mt][nt];
      c[0] = exp2f(c[0] - m[nt][0]);
      c[1] = exp2f(c[1] - m[nt][1]);
      c[2] = exp2f(c[2] - m[nt][0]);
      c[3] = exp2f(c[3] - m[nt][1]);
      sum0 += c[0] + c[2];
      sum1 += c[1] + c[3];
    }
    l[nt][0] = l[nt][0] * a[nt][0] + sum0;
    l[nt][1] = l[nt][1] * a[nt][1] + sum1;
  }
  // Past the first tiles the maxima rarely move: skip the rescale when none did.
  if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        o[i][nt][0] *= a[nt][0];
        o[i][nt][1] *= a[nt][1];
        o[i][nt][2] *= a[nt][0];
        o[i][nt][3] *= a[nt][1];
      }
  }
}

// O^T += V^T P^T for the tile's probabilities s and staged values v8.
template <int HD, int NT>
__device__ __forceinline__ void tile_pv(float (*o)[NT][4], const float (*s)[NT][4],
                                        const uint8_t* v8, int gr, int gc) {
  constexpr int kSteps = HD / 16;
  constexpr int kDims = HD / 8;  // V bytes per key a thread reads (its dimensions)
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    // P^T for keys kk*16 ..: b0 = (keys 2gc, 2gc+1; head gr), b1 = keys + 8.
    uint32_t pb[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      pb[nt][0] = transpose8x8(pack_half2(s[kk][nt][0], s[kk][nt][1]));
      pb[nt][1] = transpose8x8(pack_half2(s[kk][nt][2], s[kk][nt][3]));
    }
    // The thread's keys of this step: 2gc, 2gc+1, 2gc+8, 2gc+9; its kDims bytes of each.
    uint32_t w[4][kDims / 4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = kk * 16 + 2 * gc + (e & 1) + (e >> 1) * 8;
      const uint8_t* src =
          v8 + key * HD + v_chunk<HD>(key, gr * kDims / 16) * 16 + (gr * kDims) % 16;
      if constexpr (kDims == 16) {
        const uint4 x = *reinterpret_cast<const uint4*>(src);
        w[e][0] = x.x;
        w[e][1] = x.y;
        w[e][2] = x.z;
        w[e][3] = x.w;
      } else {
        const uint2 x = *reinterpret_cast<const uint2*>(src);
        w[e][0] = x.x;
        w[e][1] = x.y;
      }
    }
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      // Bytes 2i and 2i+1 of the thread's dimensions, for two keys side by side:
      // [k0.b2i, k1.b2i, k0.b2i+1, k1.b2i+1], widened to rows gr and gr+8 of the A tile.
      const int p = (i & 1) * 2;
      const uint32_t sel = p | ((4 + p) << 4) | ((p + 1) << 8) | ((5 + p) << 12);
      uint32_t va[4];
      fp8x4_to_b16x2(__byte_perm(w[0][i / 2], w[1][i / 2], sel), &va[0], &va[1]);
      fp8x4_to_b16x2(__byte_perm(w[2][i / 2], w[3][i / 2], sel), &va[2], &va[3]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma16816(o[i][nt], va, pb[nt][0], pb[nt][1]);
    }
  }
}

// The warp's outputs and (max, sum) per head into shared memory for merge_warps:
// o_s [warp][head][HD], ml_s [warp][head][2].
template <int HD, int NT>
__device__ __forceinline__ void stash_warp(float* o_s, float* ml_s, const float (*o)[NT][4],
                                           const float (*m)[2], const float (*l)[2], int warp,
                                           int gr, int gc) {
  constexpr int kSteps = HD / 16;
  constexpr int kDims = HD / 8;
  constexpr int kHeads = 8 * NT;
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int d0 = gr * kDims + 2 * i, d1 = d0 + 1;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int h0 = warp * kHeads + nt * 8 + 2 * gc, h1 = h0 + 1;
      o_s[h0 * HD + d0] = o[i][nt][0];
      o_s[h1 * HD + d0] = o[i][nt][1];
      o_s[h0 * HD + d1] = o[i][nt][2];
      o_s[h1 * HD + d1] = o[i][nt][3];
    }
  }
  if (gr == 0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int h = warp * kHeads + nt * 8 + 2 * gc + e;
        ml_s[h * 2] = m[nt][e];
        ml_s[h * 2 + 1] = l[nt][e];
      }
  }
}

template <int HD, int NT>
__global__ void __launch_bounds__(kThreads, min_blocks<NT>())
    decode_fp8_kernel(const __half* __restrict__ q, KvLayerView kv, DeviceBatch b,
                      const int32_t* __restrict__ rows, int n_heads, float scale_log2, int n_splits,
                      void* __restrict__ out, ActType out_type, float* __restrict__ part) {
  pdl_trigger();
  pdl_wait();
  constexpr int kSteps = HD / 16;  // k steps of S^T; also m tiles of O^T
  constexpr int kHeads = 8 * NT;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int gr = lane / 4, gc = lane % 4;
  uint8_t* stage = smem + warp * 2 * 2 * kTileKeys * HD;  // [buffer][K, V][key][HD]

  const int wi = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int row = rows[wi];
  const int group = n_heads / kv.n_kv_heads;
  const DecodeSplit sp = decode_split(b, row, split, n_splits);
  const int k_begin = sp.k_begin, n_keys = sp.n_keys;
  const int64_t qd = static_cast<int64_t>(n_heads) * HD;

  uint32_t qf[NT][kSteps][2];
  load_q_t<HD, NT>(qf, q + row * qd + static_cast<int64_t>(g) * group * HD, group, gr, gc);

  // O^T: m tile i, rows gr / gr+8 = dimensions gr*HD/8 + 2i / +1; columns = heads
  // nt*8 + 2gc, +1.
  float o[kSteps][NT][4];
#pragma unroll
  for (int i = 0; i < kSteps; ++i)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) o[i][nt][0] = o[i][nt][1] = o[i][nt][2] = o[i][nt][3] = 0.0f;
  // Per head column (nt*8 + 2gc + e): running max and this thread's share of the sum.
  float m[NT][2], l[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) m[nt][0] = m[nt][1] = -INFINITY, l[nt][0] = l[nt][1] = 0.0f;

  // Each tile's block-table entries are requested a tile ahead, so the table read's
  // latency is not paid before every tile's copies.
  const SplitKeys keys{sp.table, k_begin, n_keys, kv.block_size, kv.n_kv_heads, g};
  auto lane_ref = [&](int t0) { return keys.ref(t0, lane); };
  auto slot_of = [&](KeyRef k) { return keys.slot(k); };
  constexpr int kPieces = HD / 16;  // 16-byte pieces per row
  constexpr int kStep = kWarps * kTileKeys;
  auto stage_tile = [&](int t0, uint32_t slot, int buf) {
    uint8_t* kd = stage + buf * 2 * kTileKeys * HD;
    uint8_t* vd = kd + kTileKeys * HD;
#pragma unroll
    for (int j = 0; j < kTileKeys * kPieces / kWarp; ++j) {
      const int r = j * (kWarp / kPieces) + lane / kPieces, c = lane % kPieces;
      const size_t off = static_cast<size_t>(__shfl_sync(0xffffffffu, slot, r)) * HD + c * 16;
      const bool valid = t0 + r < n_keys;
      cp_async16(kd + r * HD + k_chunk<HD>(r, c) * 16, static_cast<const uint8_t*>(kv.k) + off,
                 valid);
      cp_async16(vd + r * HD + v_chunk<HD>(r, c) * 16, static_cast<const uint8_t*>(kv.v) + off,
                 valid);
    }
    cp_async_commit();
  };
  const int first = warp * kTileKeys;
  KeyRef next_ref{0, 0};  // the entries of the next tile to be staged
  if (first < n_keys) {
    const KeyRef r0 = lane_ref(first);
    next_ref = lane_ref(first + kStep);
    stage_tile(first, slot_of(r0), 0);
  }

  int buf = 0;
  for (int t0 = first; t0 < n_keys; t0 += kStep, buf ^= 1) {
    const uint8_t* k8 = stage + buf * 2 * kTileKeys * HD;
    const uint8_t* v8 = k8 + kTileKeys * HD;
    // The warp's next tile goes into the other buffer before this one is used (an empty
    // group past the end keeps the count).
    if (t0 + kStep < n_keys) {
      stage_tile(t0 + kStep, slot_of(next_ref), buf ^ 1);
      next_ref = lane_ref(t0 + 2 * kStep);
    } else {
      cp_async_commit();
    }
    cp_async_wait_group<1>();
    __syncwarp();

    float s[2][NT][4];
    tile_scores<HD, NT>(s, qf, k8, gr, gc);
    tile_softmax<HD, NT>(s, o, m, l, n_keys - t0, scale_log2, gr);
    tile_pv<HD, NT>(o, s, v8, gr, gc);
    __syncwarp();  // the tile's memory is refilled next
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int off = 4; off < kWarp; off <<= 1)
        l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], off);

  // Merge the warps through shared memory, where the tiles were.
  __syncthreads();
  float* o_s = reinterpret_cast<float*>(smem);  // [warp][head][HD]
  float* ml_s = o_s + kWarps * kHeads * HD;     // [warp][head][2]
  stash_warp<HD, NT>(o_s, ml_s, o, m, l, warp, gr, gc);
  __syncthreads();
  merge_warps<HD>(o_s, ml_s, kWarps, kHeads, wi, g, group, n_heads, split, n_splits, row,
                  kv.v_scale, out, out_type, part);
}

template <int HD, int NT>
Status launch(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
              const AttentionPlan& plan, int n_heads, float scale, int splits, void* out,
              ActType out_type, cudaStream_t stream) {
  constexpr size_t kSmem = smem_bytes<HD, NT>();
  static bool configured = false;  // per kernel, so per instantiation of this launcher
  return launch_decode_tc(decode_fp8_kernel<HD, NT>, configured, kSmem, kThreads, q, kv, b, plan,
                          n_heads, scale * kLog2e * kv.k_scale, splits, out, out_type, stream,
                          "decode_attention_fp8");
}

}  // namespace

bool has_decode_fp8_kernel(int group, int head_dim) {
  return group >= 1 && group <= 16 && (head_dim == 64 || head_dim == 128);
}

Status decode_attention_fp8(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                            const AttentionPlan& plan, int n_heads, float scale, int splits,
                            void* out, ActType out_type, cudaStream_t stream) {
  if (kv.type != KvType::kFp8E4M3) return invalid_argument("decode_attention_fp8: not an FP8 pool");
  const bool wide = n_heads / kv.n_kv_heads > 8;
  if (kv.head_dim == 64)
    return wide ? launch<64, 2>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream)
                : launch<64, 1>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  if (kv.head_dim == 128)
    return wide ? launch<128, 2>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream)
                : launch<128, 1>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  return unsupported("FP8 decode attention: head size");
}

}  // namespace pagoda::cuda
