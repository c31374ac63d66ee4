// The attention kernels behind attention() (attention.cpp dispatches), and the device
// helpers the decode kernels share.
#pragma once

#include "backend/cuda/kernels.h"
#ifdef __CUDACC__
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#endif

namespace pagoda::cuda {

constexpr int kMaxDecodeSplits = 32;
constexpr int kDecodeTargetBlocks = 264;  // two waves of an H100/H200's 132 SMs
constexpr int kDecodeMinChunk = 64;       // keys per split at least

#ifdef __CUDACC__
// One decode row's share of its context: keys [k_begin, k_begin + n_keys) of the
// sequence's block table. Later splits of a short context are empty (n_keys 0). Every
// decode kernel cuts the context here, so their splits agree with the merge.
struct DecodeSplit {
  int k_begin, n_keys;
  const int32_t* table;
};
__device__ __forceinline__ DecodeSplit decode_split(const DeviceBatch& b, int row, int split,
                                                    int n_splits) {
  const int seq = b.row_seq[row];
  const int ctx = b.row_pos[row] + 1;
  const int chunk = max(kDecodeMinChunk, ((ctx + n_splits - 1) / n_splits + 15) & ~15);
  const int k_begin = split * chunk, k_end = min(ctx, k_begin + chunk);
  return {k_begin, max(0, k_end - k_begin), b.blocks + b.seq_blocks_off[seq]};
}

// Where the keys of a decode split sit in the paged pool, for the tensor-core kernels: a
// lane finds one key's block-table entry and offset (ref), then its slot in the pool of
// KV head g (slot), and the warp passes the slots around by shuffles. Keys past the split
// repeat the last one (their copies are zero-filled and their scores masked).
struct KeyRef {
  int32_t block;
  int offset;
};
struct SplitKeys {
  const int32_t* table;
  int k_begin, n_keys, block_size, n_kv_heads, g;
  // Key t0 + lane of the split.
  __device__ __forceinline__ KeyRef ref(int t0, int lane) const {
    const int pos = k_begin + min(t0 + lane, n_keys - 1);
    return KeyRef{table[pos / block_size], pos % block_size};
  }
  __device__ __forceinline__ uint32_t slot(KeyRef k) const {
    return (static_cast<uint32_t>(k.block) * n_kv_heads + g) * block_size + k.offset;
  }
};

// Split-KV partials: [decode row][head][split][hd + 2], the split's unnormalised output,
// then its max (log2 units) and its sum, which combine_kernel merges.
__device__ __forceinline__ float* split_partial(float* part, int wi, int h, int split, int n_heads,
                                                int n_splits, int hd) {
  return part + ((static_cast<int64_t>(wi) * n_heads + h) * n_splits + split) * (hd + 2);
}

// Element d of head h's output for decode row `row` (work item wi), merged over a block:
// acc is the sum of p * v (V scale applied), m and l the head's maximum (log2 units) and
// sum. With one split, the normalised output; else this split's partials.
__device__ __forceinline__ void write_head_output(float acc, float m, float l, int d, int hd, int h,
                                                  int64_t row, int n_heads, int wi, int split,
                                                  int n_splits, void* out, ActType out_type,
                                                  float* part) {
  if (n_splits == 1) {
    store_act(out, out_type, row * n_heads * hd + static_cast<int64_t>(h) * hd + d,
              l > 0 ? acc / l : 0.0f);
    return;
  }
  float* pp = split_partial(part, wi, h, split, n_heads, n_splits, hd);
  pp[d] = acc;
  if (d == 0) {
    pp[hd] = m;
    pp[hd + 1] = l;
  }
}

// The end of a block of the tensor-core decode kernels: its warps left their rows'
// outputs in o_s ([warp][row][HD]) and their (max, sum) in ml_s ([warp][row][2]), row r
// standing for head g * group + r. Writes the merged output, or with several splits
// this split's partials.
template <int HD>
__device__ __forceinline__ void merge_warps(const float* o_s, const float* ml_s, int n_warps,
                                            int rows_per_warp, int wi, int g, int group,
                                            int n_heads, int split, int n_splits, int64_t row,
                                            float v_scale, void* out, ActType out_type,
                                            float* part) {
  for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
    const int r = i / HD, d = i % HD;
    float m = -INFINITY;
    for (int w = 0; w < n_warps; ++w) m = fmaxf(m, ml_s[(w * rows_per_warp + r) * 2]);
    float l = 0.0f, acc = 0.0f;
    for (int w = 0; w < n_warps; ++w) {
      const float mw = ml_s[(w * rows_per_warp + r) * 2];
      if (mw > -INFINITY) {
        const float f = exp2f(mw - m);
        l += f * ml_s[(w * rows_per_warp + r) * 2 + 1];
        acc += f * o_s[(w * rows_per_warp + r) * HD + d];
      }
    }
    write_head_output(acc * v_scale, m, l, d, HD, g * group + r, row, n_heads, wi, split, n_splits,
                      out, out_type, part);
  }
}

// The tensor-core decode kernels' common launch: decode rows x KV heads x splits blocks
// of `threads`, `smem` bytes of dynamic shared memory (allowed past the 48 KiB default
// once per kernel, `configured` keeping the count), as a programmatic dependent.
template <typename Kernel>
Status launch_decode_tc(Kernel* kernel, bool& configured, size_t smem, int threads,
                        const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                        const AttentionPlan& plan, int n_heads, float scale_log2, int splits,
                        void* out, ActType out_type, cudaStream_t stream, const char* name) {
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return cuda_status(e, name);
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>(plan.n_decode_rows), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(splits));
  launch_dependent_smem(kernel, grid, threads, smem, stream, reinterpret_cast<const __half*>(q), kv,
                        b, plan.decode_rows, n_heads, scale_log2, splits, out, out_type,
                        static_cast<float*>(plan.workspace));
  return launch_status(name);
}
#endif

Status decode_attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                        const AttentionPlan& plan, int n_heads, float scale, void* out,
                        ActType out_type, cudaStream_t stream);
// Decode rows over an fp16 pool on tensor cores (attention_decode_tc.cu), for GQA groups
// of up to 16 heads and head sizes 64 and 128; `splits` as decode_attention chose it.
bool has_decode_tc_kernel(int group, int head_dim);
Status decode_attention_tc(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                           const AttentionPlan& plan, int n_heads, float scale, int splits,
                           void* out, ActType out_type, cudaStream_t stream);
// The same over an FP8 pool, with the keys on the mma's M side (attention_decode_fp8.cu).
bool has_decode_fp8_kernel(int group, int head_dim);
Status decode_attention_fp8(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                            const AttentionPlan& plan, int n_heads, float scale, int splits,
                            void* out, ActType out_type, cudaStream_t stream);
Status prefill_attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                         const AttentionPlan& plan, int n_heads, float scale, void* out,
                         ActType out_type, cudaStream_t stream);

}  // namespace pagoda::cuda
