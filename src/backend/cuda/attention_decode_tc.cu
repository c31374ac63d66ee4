// Decode attention on tensor cores over an fp16 KV pool, for GQA: a block takes one query
// row, the query heads of one KV head (up to 16, padded with zero rows to the 16 rows of
// an mma tile) and one split of the context. Each of its four warps walks its own tiles
// of 32 keys with its own online-softmax state (no block barrier in the key loop), and
// the warps are merged through shared memory at the end. S = Q K^T and O += P V are
// mma.m16n8k16 products as in the prefill kernel. Against the row kernel
// (attention_decode.cu) this moves the dot products and the sums over the group's heads
// from shuffles and scalar FMAs to the tensor cores, so a step is bound by reading the
// cache rather than by issuing instructions. FP8 pools have their own kernel
// (attention_decode_fp8.cu), which puts the keys on the mma's M side.
//
// A tile's keys are gathered from the paged cache into the warp's shared memory with
// cp.async, as padded rows for ldmatrix. Each lane finds one key's slot in the pool (one
// block-table lookup and one division per key, not per 16-byte piece, a tile ahead) and
// the warp passes the slots around with shuffles: addressing was half of all instructions
// issued when every piece computed its own.
#include "backend/cuda/attention_impl.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/softmax_tile.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTileKeys = 32;  // keys per warp tile
constexpr int kRows = 16;      // query rows of an mma tile (the group's heads, then zeros)
constexpr float kLog2e = 1.4426950408889634f;

// Q, then per warp its K and V tiles.
template <int HD>
constexpr size_t smem_bytes() {
  return static_cast<size_t>(kRows) * (HD + 8) * sizeof(__half) +
         static_cast<size_t>(kWarps) * 2 * kTileKeys * (HD + 8) * sizeof(__half);
}

// Three blocks fit an SM's shared memory and registers.
template <int HD>
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
  __half* k_s = q_s + kRows * kStride + warp * 2 * kTileKeys * kStride;
  __half* v_s = k_s + kTileKeys * kStride;

  const int wi = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int row = rows[wi];
  const int group = n_heads / kv.n_kv_heads;
  const DecodeSplit sp = decode_split(b, row, split, n_splits);
  const int k_begin = sp.k_begin, n_keys = sp.n_keys;
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
    const int mi = lane / 8;
    ldmatrix_x4(qf[ks], q_s + ((mi & 1) * 8 + lane % 8) * kStride + ks * 16 + (mi >> 1) * 8);
  }

  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  // Each tile's block-table entries are requested a tile ahead, so the table read's
  // latency is not paid before every tile's copies.
  const SplitKeys keys{sp.table, k_begin, n_keys, kv.block_size, kv.n_kv_heads, g};
  auto lane_ref = [&](int t0) { return keys.ref(t0, lane); };
  auto slot_of = [&](KeyRef k) { return keys.slot(k); };
  constexpr int kStep = kWarps * kTileKeys;
  const int first = warp * kTileKeys;
  KeyRef next_ref{0, 0};  // the entries of the next tile to be staged
  if (first < n_keys) next_ref = lane_ref(first);

  for (int t0 = first; t0 < n_keys; t0 += kStep) {
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
    __syncwarp();

    float s[kTileKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    qk_tile<HD, kTileKeys>(s, qf, k_s, kStride, lane);
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool valid = t0 + nt * 8 + 2 * gc + e < n_keys;  // key t0 always is
        s[nt][e] = valid ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][2 + e] = valid ? s[nt][2 + e] * scale_log2 : -INFINITY;
      }
    }
    softmax_tile_m16<kTileKeys, HD>(s, o, m0, m1, l0, l1);
    pv_tile_m16<kTileKeys, HD>(o, s, v_s, kStride, lane);
    __syncwarp();  // the tile's memory is refilled next
  }
  l0 = quad_sum(l0);
  l1 = quad_sum(l1);

  // Merge the warps: their outputs and (max, sum) pairs go to shared memory, where the
  // key tiles were.
  __syncthreads();
  float* o_s = reinterpret_cast<float*>(smem + kRows * kStride);  // [warp][row][HD]
  float* ml_s = o_s + kWarps * kRows * HD;                        // [warp][row][2]
  const int r0 = warp * kRows + gr, r1 = r0 + 8;
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) {
    const int d0 = j * 8 + 2 * gc, d1 = d0 + 1;  // output column n of n tile j
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
  merge_warps<HD>(o_s, ml_s, kWarps, kRows, wi, g, group, n_heads, split, n_splits, row, kv.v_scale,
                  out, out_type, part);
}

template <int HD>
Status launch(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
              const AttentionPlan& plan, int n_heads, float scale, int splits, void* out,
              ActType out_type, cudaStream_t stream) {
  constexpr size_t kSmem = smem_bytes<HD>();
  static_assert(
      kSmem >= (kRows * (HD + 8)) * sizeof(__half) + (kWarps * kRows * (HD + 2)) * sizeof(float),
      "the merge reuses the tile memory");
  static bool configured = false;  // per kernel, so per instantiation of this launcher
  return launch_decode_tc(decode_tc_kernel<HD>, configured, kSmem, kThreads, q, kv, b, plan,
                          n_heads, scale * kLog2e * kv.k_scale, splits, out, out_type, stream,
                          "decode_attention_tc");
}

}  // namespace

bool has_decode_tc_kernel(int group, int head_dim) {
  return group >= 1 && group <= kRows && (head_dim == 64 || head_dim == 128);
}

Status decode_attention_tc(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                           const AttentionPlan& plan, int n_heads, float scale, int splits,
                           void* out, ActType out_type, cudaStream_t stream) {
  if (kv.type != KvType::kF16) return invalid_argument("decode_attention_tc: not an fp16 pool");
  if (kv.head_dim == 64)
    return launch<64>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  if (kv.head_dim == 128)
    return launch<128>(q, kv, b, plan, n_heads, scale, splits, out, out_type, stream);
  return unsupported("tensor-core decode attention: head size");
}

}  // namespace pagoda::cuda
