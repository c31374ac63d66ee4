// Decode attention on tensor cores, for GQA: a block takes one query row, the query heads
// of one KV head (up to 16, padded with zero rows to the 16 rows of an mma tile) and one
// split of the context. Each of its four warps walks its own tiles of 32 keys with its
// own online-softmax state (no block barrier in the key loop), and the warps are merged
// through shared memory at the end. S = Q K^T and O += P V are mma.m16n8k16 products as
// in the prefill kernel. Against the row kernel (attention_decode.cu) this moves the dot
// products and the sums over the group's heads from shuffles and scalar FMAs to the
// tensor cores, so a step is bound by reading the cache rather than by issuing
// instructions.
//
// A tile's keys are gathered from the paged cache into the warp's shared memory with
// cp.async. Each lane finds one key's slot in the pool (one block-table lookup and one
// division per key, not per 16-byte piece) and the warp passes the slots around with
// shuffles: addressing was half of all instructions issued when every piece computed its own.
// - fp16: the K and V tiles, as padded rows for ldmatrix.
// - FP8: two buffers of raw bytes, the next tile requested before this one is used, so a
//   whole tile's loads overlap the products. K and V go into the products straight from
//   the bytes, widened in registers: Q's head dimensions are permuted to the order K's
//   bytes are read in, and each thread takes V's bytes for its own HD/8 dimensions, which
//   the output merge puts back in place.
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

// Q, then per warp: fp16, its K and V tiles; FP8, two buffers of staged K and V bytes.
template <int HD, bool FP8>
constexpr size_t smem_bytes() {
  return static_cast<size_t>(kRows) * (HD + 8) * sizeof(__half) +
         (FP8 ? static_cast<size_t>(kWarps) * 2 * 2 * kTileKeys * HD
              : static_cast<size_t>(kWarps) * 2 * kTileKeys * (HD + 8) * sizeof(__half));
}

// Staged FP8 K rows of 128 bytes: odd keys keep their two 64-byte halves swapped, so the
// 16-byte reads of a quarter warp (two keys, one half each) fall in distinct banks.
template <int HD>
__device__ __forceinline__ int k8_chunk(int key, int chunk) {
  return HD == 128 ? chunk ^ ((key & 1) << 2) : chunk;
}
// Staged FP8 V rows: a quarter warp reads keys 2c (+1, +8, +9) for c = 0..3, two 16-byte
// pieces each (HD 128), so bits 1-2 of the key move the piece within the row. HD 64 rows
// are 64 bytes and keep a 2-way conflict.
template <int HD>
__device__ __forceinline__ int v8_chunk(int key, int chunk) {
  return HD == 128 ? chunk ^ (((key >> 1) & 3) << 1) : chunk ^ ((key >> 1) & 3);
}

// Three blocks fit an SM's shared memory (fp16) and registers.
template <int HD, bool FP8>
__global__ void __launch_bounds__(kThreads, 3)
    decode_tc_kernel(const __half* __restrict__ q, KvLayerView kv, DeviceBatch b,
                     const int32_t* __restrict__ rows, int n_heads, float scale_log2, int n_splits,
                     void* __restrict__ out, ActType out_type, float* __restrict__ part) {
  pdl_trigger();
  pdl_wait();
  constexpr int kStride = HD + 8;  // padded rows: ldmatrix rows fall in distinct banks
  constexpr int kChunks = HD / 8;  // 8-element pieces per fp16 row
  constexpr int kDims = HD / 8;    // FP8: V dimensions per thread (one per 8-wide n tile)
  extern __shared__ __align__(16) __half smem[];
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  __half* q_s = smem;
  __half* k_s = q_s + kRows * kStride + warp * 2 * kTileKeys * kStride;  // fp16
  __half* v_s = k_s + kTileKeys * kStride;                               // fp16
  uint8_t* stage8 = reinterpret_cast<uint8_t*>(q_s + kRows * kStride) +
                    warp * 2 * 2 * kTileKeys * HD;  // FP8: [buffer][K, V][key][HD]

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

  // Key t0 + lane's place in the pool: its block (a block-table entry, read from global
  // memory) and its offset there. Keys past the split repeat the last one (their copies
  // are zero-filled and their scores masked). Each tile's entries are requested a tile
  // ahead, so the table read's latency is not paid before every tile's copies.
  struct KeyRef {
    int32_t block;
    int offset;
  };
  auto lane_ref = [&](int t0) {
    const int pos = k_begin + min(t0 + lane, n_keys - 1);
    return KeyRef{table[pos / bs], pos % bs};
  };
  auto slot_of = [&](KeyRef k) {
    return (static_cast<uint32_t>(k.block) * kv.n_kv_heads + g) * bs + k.offset;
  };
  constexpr int kChunks8 = HD / 16;  // 16-byte pieces per FP8 row
  constexpr int kStep = kWarps * kTileKeys;
  // One tile's K and V bytes into buffer `buf`, as one cp.async group.
  auto stage_fp8 = [&](int t0, uint32_t slot, int buf) {
    uint8_t* kd = stage8 + buf * 2 * kTileKeys * HD;
    uint8_t* vd = kd + kTileKeys * HD;
#pragma unroll
    for (int j = 0; j < kTileKeys * kChunks8 / kWarp; ++j) {
      const int r = j * (kWarp / kChunks8) + lane / kChunks8, c = lane % kChunks8;
      const size_t off = static_cast<size_t>(__shfl_sync(0xffffffffu, slot, r)) * HD + c * 16;
      const bool valid = t0 + r < n_keys;
      cp_async16(kd + r * HD + k8_chunk<HD>(r, c) * 16, static_cast<const uint8_t*>(kv.k) + off,
                 valid);
      cp_async16(vd + r * HD + v8_chunk<HD>(r, c) * 16, static_cast<const uint8_t*>(kv.v) + off,
                 valid);
    }
    cp_async_commit();
  };
  const int first = warp * kTileKeys;
  KeyRef next_ref{0, 0};  // the entries of the next tile to be staged
  if (first < n_keys) {
    const KeyRef r0 = lane_ref(first);
    if constexpr (FP8) {
      next_ref = lane_ref(first + kStep);
      stage_fp8(first, slot_of(r0), 0);
    } else {
      next_ref = r0;  // fp16 tiles are staged at the top of the loop
    }
  }

  int buf = 0;
  for (int t0 = first; t0 < n_keys; t0 += kStep, buf ^= 1) {
    const uint8_t* k8 = stage8 + buf * 2 * kTileKeys * HD;
    const uint8_t* v8 = k8 + kTileKeys * HD;
    if constexpr (!FP8) {
      const uint32_t slot = slot_of(next_ref);
      next_ref = lane_ref(t0 + kStep);
#pragma unroll 4
      for (int j = 0; j < kTileKeys * kChunks / kWarp; ++j) {
        const int r = j * (kWarp / kChunks) + lane / kChunks, c = lane % kChunks;
        const size_t off = static_cast<size_t>(__shfl_sync(0xffffffffu, slot, r)) * HD + c * 8;
        const bool valid = t0 + r < n_keys;
        cp_async16(k_s + r * kStride + c * 8, static_cast<const __half*>(kv.k) + off, valid);
        cp_async16(v_s + r * kStride + c * 8, static_cast<const __half*>(kv.v) + off, valid);
      }
      cp_async_wait_all();
    } else {
      // The warp's next tile goes into the other buffer before this one is used (an
      // empty group past the end keeps the count).
      if (t0 + kStep < n_keys) {
        stage_fp8(t0 + kStep, slot_of(next_ref), buf ^ 1);
        next_ref = lane_ref(t0 + 2 * kStep);
      } else {
        cp_async_commit();
      }
      cp_async_wait_group<1>();
    }
    __syncwarp();

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
    // Past the first tiles the maxima rarely move: skip the rescale when no row's did.
    if (__any_sync(0xffffffffu, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
      for (int i = 0; i < HD / 8; ++i) {
        o[i][0] *= a0;
        o[i][1] *= a0;
        o[i][2] *= a1;
        o[i][3] *= a1;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      uint32_t pf[4];
      pf[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
      pf[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
      pf[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      if constexpr (FP8) {
        // The thread's keys are this step's k indices 2gc, 2gc+1 (b0) and 2gc+8, 2gc+9
        // (b1); its n column in every n tile is gr, and n tile j stands for dimension
        // gr * kDims + j. A key's kDims bytes for those dimensions are one read.
        uint32_t w[4][kDims / 4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kk * 16 + 2 * gc + (e & 1) + (e >> 1) * 8;
          const uint8_t* src =
              v8 + key * HD + v8_chunk<HD>(key, gr * kDims / 16) * 16 + (gr * kDims) % 16;
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
        for (int j = 0; j < kDims; ++j) {
          // Byte j % 4 of the two keys' words, side by side in the low half.
          const uint32_t sel = (j % 4) | ((4 + j % 4) << 4);
          const uint32_t b0 = fp8x2_to_b16x2(__byte_perm(w[0][j / 4], w[1][j / 4], sel));
          const uint32_t b1 = fp8x2_to_b16x2(__byte_perm(w[2][j / 4], w[3][j / 4], sel));
          mma16816(o[j], pf, b0, b1);
        }
      } else {
        pv_step<HD>(o, pf, v_s, kStride, kk, lane);
      }
    }
    __syncwarp();  // the tile's memory is refilled next
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
  for (int j = 0; j < HD / 8; ++j) {
    // Output column n of n tile j: dimension j * 8 + n (fp16), n * kDims + j (FP8).
    const int d0 = FP8 ? (2 * gc) * kDims + j : j * 8 + 2 * gc;
    const int d1 = FP8 ? (2 * gc + 1) * kDims + j : d0 + 1;
    o_s[r0 * HD + d0] = o[j][0];
    o_s[r0 * HD + d1] = o[j][1];
    o_s[r1 * HD + d0] = o[j][2];
    o_s[r1 * HD + d1] = o[j][3];
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
