// The two attention kernels behind attention() (attention.cu dispatches).
#pragma once

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

constexpr int kMaxDecodeSplits = 32;
constexpr int kDecodeTargetBlocks = 264;  // two waves of an H100/H200's 132 SMs
constexpr int kDecodeMinChunk = 64;       // keys per split at least

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
