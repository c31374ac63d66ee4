// The two attention kernels behind attention() (attention.cu dispatches).
#pragma once

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

constexpr int kMaxDecodeSplits = 32;
constexpr int kDecodeTargetBlocks = 264;  // two waves of an H100/H200's 132 SMs
constexpr int kDecodeMinChunk = 64;       // keys per split at least

#ifdef __CUDACC__
// One decode row's share of its context: keys [k_begin, k_begin + n_keys) of the
// sequence's block table. Later splits of a short context are empty (n_keys 0). Both
// decode kernels cut the context here, so their splits agree with the merge.
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
#endif

Status decode_attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                        const AttentionPlan& plan, int n_heads, float scale, void* out,
                        ActType out_type, cudaStream_t stream);
// Decode rows on tensor cores (attention_decode_tc.cu), for GQA groups of up to 16 heads
// and head sizes 64 and 128; `splits` as decode_attention chose it.
bool has_decode_tc_kernel(int group, int head_dim);
Status decode_attention_tc(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                           const AttentionPlan& plan, int n_heads, float scale, int splits,
                           void* out, ActType out_type, cudaStream_t stream);
Status prefill_attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                         const AttentionPlan& plan, int n_heads, float scale, void* out,
                         ActType out_type, cudaStream_t stream);

}  // namespace pagoda::cuda
