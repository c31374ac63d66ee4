// Decode attention on tensor cores, for GQA: a block takes one query row, the query heads
// of one KV head (up to 16, padded with zero rows to the 16 rows of an mma tile) and one
// split of the context. Each of its four warps walks its own tiles of 32 keys with its
// own online-softmax state (no block barrier in the key loop): the tile is gathered from
// the paged cache into the warp's shared memory with cp.async (an FP8 tile into a staging
// area, widened to fp16 there, and the warp's next tile requested before this one is
// used, so its loads overlap the products), S = Q K^T and O += P V are mma.m16n8k16 products as in
// the prefill kernel, and the warps are merged through shared memory at the end. Against the row
// kernel (attention_decode.cu) this moves the dot products and the sums over the group's
// heads from shuffles and scalar FMAs to the tensor cores, so a step is bound by reading
// the cache rather than by issuing instructions, in fp16 and more so in FP8, whose bytes
// per key are half.
#include "backend/cuda/attention_impl.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTileKeys = 32;  // keys per warp tile
constexpr int kRows = 16;      // query rows of an mma tile (the group's heads, then zeros)
constexpr float kLog2e = 1.4426950408889634f;

// Q and each warp's fp16 K and V tiles; with FP8, Q, each warp's fp16 V tile and its
// staged K and V bytes (K is read from there straight into the products).
template <int HD, bool FP8>
constexpr size_t smem_bytes() {
  return FP8 ? static_cast<size_t>(kRows + kWarps * kTileKeys) * (HD + 8) * sizeof(__half) +
                   static_cast<size_t>(kWarps) * 2 * kTileKeys * HD
             : static_cast<size_t>(kRows + kWarps * 2 * kTileKeys) * (HD + 8) * sizeof(__half);
}

// Staged FP8 K rows of 128 bytes: odd keys keep their two 64-byte halves swapped, so the
// 16-byte reads of a quarter warp (two keys, one half each) fall in distinct banks.
template <int HD>
__device__ __forceinline__ int k8_chunk(int key, int chunk) {
  return HD == 128 ? chunk ^ ((key & 1) << 2) : chunk;
}

// Three blocks fit an SM's shared memory.
template <int HD, bool FP8>
__global__ void __launch_bounds__(kThreads, 3)
    decode_tc_kernel(const __half* __restrict__ q, KvLayerView kv, DeviceBatch b,
                     const int32_t* __restrict__ rows, int n_heads, float scale_log2, int n_splits,
                     void* __restrict__ out, ActType out_type, float* __restrict__ part) {
  pdl_trigger();
  pdl_wait();
  constexpr int kStride = HD + 8;  // padded rows: ldmatrix rows fall in distinct banks
  constexpr int kChunks = HD / 8;  // 8-element pieces per row
  extern __shared__ __align__(16) __half smem[];
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  __half* q_s = smem;
  __half* k_s = q_s + kRows * kStride + warp * 2 * kTileKeys * kStride;  // fp16 only
  __half* v_s =
      FP8 ? q_s + kRows * kStride + warp * kTileKeys * kStride : k_s + kTileKeys * kStride;

  const int wi = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int row = rows[wi];
  const int group = n_heads / kv.n_kv_heads;
  const DecodeSplit sp = decode_split(b, row, split, n_splits);
  const int k_begin = sp.k_begin, n_keys = sp.n_keys;
  const int32_t* table = sp.table;
  const int bs = kv.block_size;
  const int64_t qd = static_cast<int64_t>(n_heads) * HD;
  const int gr = lane / 4, gc = lane % 4;

  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < group)
      v = *reinterpret_cast<const uint4*>(q + row * qd + static_cast<int64_t>(g * group + r) * HD +
                                          c * 8);
    *reinterpret_cast<uint4*>(q_s + r * kStride + c * 8) = v;
  }
  __syncthreads();
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    if constexpr (FP8) {
      // The head dimensions in the order the staged K bytes are read (see below): in
      // step ks the thread's four k indices (2gc, 2gc+1, 2gc+8, 2gc+9) are the dimensions
      // base..base+3. A permutation of the dimensions shared by Q and K leaves Q K^T as it is.
      const int base = (ks / 4) * 64 + gc * 16 + (ks % 4) * 4;
      const uint2 lo = *reinterpret_cast<const uint2*>(q_s + gr * kStride + base);
      const uint2 hi = *reinterpret_cast<const uint2*>(q_s + (gr + 8) * kStride + base);
      qf[ks][0] = lo.x;
      qf[ks][1] = hi.x;
      qf[ks][2] = lo.y;
      qf[ks][3] = hi.y;
    } else {
      const int mi = lane / 8;
      ldmatrix_x4(qf[ks], q_s + ((mi & 1) * 8 + lane % 8) * kStride + ks * 16 + (mi >> 1) * 8);
    }
  }

  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  // Keys past this split are zero-filled (their scores are masked below).
  auto key_offset = [&](int t0, int r, bool* valid) {
    *valid = t0 + r < n_keys;
    const int pos = k_begin + (*valid ? t0 + r : 0);
    return ((static_cast<size_t>(table[pos / bs]) * kv.n_kv_heads + g) * bs + pos % bs) * HD;
  };
  constexpr int kChunks8 = HD / 16;  // 16-byte pieces per FP8 row
  uint8_t* k8 = reinterpret_cast<uint8_t*>(smem + (kRows + kWarps * kTileKeys) * kStride) +
                warp * 2 * kTileKeys * HD;
  uint8_t* v8 = k8 + kTileKeys * HD;
  // One tile's K (swizzled, k8_chunk) or V bytes, as a cp.async group of its own.
  auto stage_fp8 = [&](int t0, bool is_k) {
    const uint8_t* src = static_cast<const uint8_t*>(is_k ? kv.k : kv.v);
#pragma unroll 4
    for (int i = lane; i < kTileKeys * kChunks8; i += kWarp) {
      const int r = i / kChunks8, c = i % kChunks8;
      bool valid;
      const size_t base = key_offset(t0, r, &valid) + c * 16;
      if (is_k)
        cp_async16(k8 + r * HD + k8_chunk<HD>(r, c) * 16, src + base, valid);
      else
        cp_async16(v8 + r * HD + c * 16, src + base, valid);
    }
    cp_async_commit();
  };
  if constexpr (FP8) {
    if (warp * kTileKeys < n_keys) {
      stage_fp8(warp * kTileKeys, false);
      stage_fp8(warp * kTileKeys, true);
    }
  }

  for (int t0 = warp * kTileKeys; t0 < n_keys; t0 += kWarps * kTileKeys) {
    if constexpr (!FP8) {
#pragma unroll 4
      for (int i = lane; i < kTileKeys * kChunks; i += kWarp) {
        const int r = i / kChunks, c = i % kChunks;
        bool valid;
        const size_t base = key_offset(t0, r, &valid) + c * 8;
        cp_async16(k_s + r * kStride + c * 8, static_cast<const __half*>(kv.k) + base, valid);
        cp_async16(v_s + r * kStride + c * 8, static_cast<const __half*>(kv.v) + base, valid);
      }
      cp_async_wait_all();
      __syncwarp();
    } else {
      cp_async_wait_all();
      __syncwarp();
      // V is widened to fp16 for ldmatrix.trans; its staging area is then free for the
      // warp's next tile, requested at once.
#pragma unroll 4
      for (int i = lane; i < kTileKeys * kChunks8; i += kWarp) {
        const int r = i / kChunks8, c = i % kChunks8;
        const uint4 vb = *reinterpret_cast<const uint4*>(v8 + r * HD + c * 16);
        __half* vd = v_s + r * kStride + c * 16;
        *reinterpret_cast<uint4*>(vd) = fp8x8_to_half8(make_uint2(vb.x, vb.y));
        *reinterpret_cast<uint4*>(vd + 8) = fp8x8_to_half8(make_uint2(vb.z, vb.w));
      }
      __syncwarp();
      if (t0 + kWarps * kTileKeys < n_keys) stage_fp8(t0 + kWarps * kTileKeys, false);
    }

    float s[kTileKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    if constexpr (FP8) {
      // K straight from the staged bytes into B fragments: the thread reads 16 bytes of its
      // key (gr) per 64 dimensions, four steps' worth of its four k indices, in the order
      // Q's fragments were permuted to.
#pragma unroll
      for (int nt = 0; nt < kTileKeys / 8; ++nt) {
        const int key = nt * 8 + gr;
#pragma unroll
        for (int g64 = 0; g64 < HD / 64; ++g64) {
          const uint4 w =
              *reinterpret_cast<const uint4*>(k8 + key * HD + k8_chunk<HD>(key, g64 * 4 + gc) * 16);
          const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int st = 0; st < 4; ++st) {
            uint32_t b0, b1;
            fp8x4_to_b16x2(words[st], &b0, &b1);
            mma16816(s[nt], qf[g64 * 4 + st], b0, b1);
          }
        }
      }
      __syncwarp();  // K's staging area is free: request the next tile's K
      if (t0 + kWarps * kTileKeys < n_keys) stage_fp8(t0 + kWarps * kTileKeys, true);
    } else {
      qk_tile<HD, kTileKeys>(s, qf, k_s, kStride, lane);
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool valid = t0 + nt * 8 + 2 * gc + e < n_keys;
        s[nt][e] = valid ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][2 + e] = valid ? s[nt][2 + e] * scale_log2 : -INFINITY;
        mx0 = fmaxf(mx0, s[nt][e]);
        mx1 = fmaxf(mx1, s[nt][2 + e]);
      }
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    // Key t0 is in range, so both maxima are finite.
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float a0 = exp2f(m0 - mn0), a1 = exp2f(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - mn0);
      s[nt][1] = exp2f(s[nt][1] - mn0);
      s[nt][2] = exp2f(s[nt][2] - mn1);
      s[nt][3] = exp2f(s[nt][3] - mn1);
      sum0 += s[nt][0] + s[nt][1];
      sum1 += s[nt][2] + s[nt][3];
    }
    l0 = l0 * a0 + sum0;
    l1 = l1 * a1 + sum1;
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
      o[i][0] *= a0;
      o[i][1] *= a0;
      o[i][2] *= a1;
      o[i][3] *= a1;
    }
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      uint32_t pf[4];
      pf[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
      pf[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
      pf[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dt = 0; dt < HD / 8; dt += 2) {
        const int mi = lane / 8;
        const int key = kk * 16 + (mi & 1) * 8 + lane % 8;
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, v_s + key * kStride + (dt + (mi >> 1)) * 8);
        mma16816(o[dt], pf, vf[0], vf[1]);
        mma16816(o[dt + 1], pf, vf[2], vf[3]);
      }
    }
    __syncwarp();  // the tile is refilled next
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }

  // Merge the warps: their outputs and (max, sum) pairs go to shared memory, where the
  // key tiles were.
  __syncthreads();
  float* o_s = reinterpret_cast<float*>(smem + kRows * kStride);  // [warp][row][HD]
  float* ml_s = o_s + kWarps * kRows * HD;                        // [warp][row][2]
  const int r0 = warp * kRows + gr, r1 = r0 + 8;
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    const int d = dt * 8 + 2 * gc;
    o_s[r0 * HD + d] = o[dt][0];
    o_s[r0 * HD + d + 1] = o[dt][1];
    o_s[r1 * HD + d] = o[dt][2];
    o_s[r1 * HD + d + 1] = o[dt][3];
  }
  if (gc == 0) {
    ml_s[r0 * 2] = m0;
    ml_s[r0 * 2 + 1] = l0;
    ml_s[r1 * 2] = m1;
    ml_s[r1 * 2 + 1] = l1;
  }
  __syncthreads();
  for (int i = tid; i < group * HD; i += kThreads) {
    const int r = i / HD, d = i % HD;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, ml_s[(w * kRows + r) * 2]);
    float l = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = ml_s[(w * kRows + r) * 2];
      if (mw > -INFINITY) {
        const float f = exp2f(mw - m);
        l += f * ml_s[(w * kRows + r) * 2 + 1];
        acc += f * o_s[(w * kRows + r) * HD + d];
      }
    }
    acc *= kv.v_scale;
    const int h = g * group + r;
    if (n_splits == 1) {
      store_act(out, out_type, row * qd + static_cast<int64_t>(h) * HD + d, l > 0 ? acc / l : 0.0f);
    } else {
      float* pp = part + ((static_cast<int64_t>(wi) * n_heads + h) * n_splits + split) * (HD + 2);
      pp[d] = acc;
      if (d == 0) {
        pp[HD] = m;
        pp[HD + 1] = l;
      }
    }
  }
}

template <int HD, bool FP8>
Status launch(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
              const AttentionPlan& plan, int n_heads, float scale, int splits, void* out,
              ActType out_type, cudaStream_t stream) {
  constexpr size_t kSmem = smem_bytes<HD, FP8>();
  static_assert(
      kSmem >= (kRows * (HD + 8)) * sizeof(__half) + (kWarps * kRows * (HD + 2)) * sizeof(float),
      "the merge reuses the tile memory");
  static bool configured = false;  // the attribute is per function, set once per process
  if (!configured) {
    PAGODA_CUDA_TRY(cudaFuncSetAttribute(decode_tc_kernel<HD, FP8>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmem)));
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>(plan.n_decode_rows), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(splits));
  launch_dependent_smem(decode_tc_kernel<HD, FP8>, grid, kThreads, kSmem, stream,
                        reinterpret_cast<const __half*>(q), kv, b, plan.decode_rows, n_heads,
                        scale * kLog2e * kv.k_scale, splits, out, out_type,
                        static_cast<float*>(plan.workspace));
  return launch_status("decode_attention_tc");
}

}  // namespace

bool has_decode_tc_kernel(int group, int head_dim) {
  return group >= 1 && group <= kRows && (head_dim == 64 || head_dim == 128);
}

Status decode_attention_tc(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                           const AttentionPlan& plan, int n_heads, float scale, int splits,
                           void* out, ActType out_type, cudaStream_t stream) {
  const bool fp8 = kv.type == KvType::kFp8E4M3;
  if (kv.head_dim == 64)
    return fp8 ? launch<64, true>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream)
               : launch<64, false>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  if (kv.head_dim == 128)
    return fp8 ? launch<128, true>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream)
               : launch<128, false>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  return unsupported("tensor-core decode attention: head size");
}

}  // namespace pagoda::cuda
